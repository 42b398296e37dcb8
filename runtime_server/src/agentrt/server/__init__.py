"""agentrt runtime server: run state machines, budgets, deadlines, store and event streams."""

from __future__ import annotations

from agentrt.server._config import ConfigError, Settings, load_settings
from agentrt.server._main import main

__all__ = ["ConfigError", "Settings", "load_settings", "main"]
