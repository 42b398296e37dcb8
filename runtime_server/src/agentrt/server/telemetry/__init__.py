"""Telemetry: process counters (OpenTelemetry export comes with the observability work)."""

from __future__ import annotations

from agentrt.server.telemetry._counters import COUNTER_NAMES, Counters

__all__ = ["COUNTER_NAMES", "Counters"]
