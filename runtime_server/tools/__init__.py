"""Tool host client: routing, call metadata, typed outcomes, local spawning."""

from __future__ import annotations

from runtime_server.tools._channel import HostTls
from runtime_server.tools._router import (
    CallMetadata,
    ToolHostError,
    ToolOutcome,
    ToolRouter,
    tool_result_text,
)
from runtime_server.tools._slots import SlotTimeout, ToolSlots
from runtime_server.tools._spawn import SpawnedToolHost

__all__ = [
    "CallMetadata",
    "HostTls",
    "SlotTimeout",
    "SpawnedToolHost",
    "ToolHostError",
    "ToolOutcome",
    "ToolRouter",
    "ToolSlots",
    "tool_result_text",
]
