"""Plugins shipped with agentrt: demo and test tools, and an example of a plugin file."""

from __future__ import annotations
