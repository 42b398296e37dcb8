"""agentrt runtime server: run state machines, budgets, deadlines, store and event streams."""

from __future__ import annotations

from agentrt.server._main import main
from agentrt.server.config import ConfigError, Settings, load_settings

__all__ = ["ConfigError", "Settings", "load_settings", "main"]
