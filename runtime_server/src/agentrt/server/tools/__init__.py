"""Tool host client: routing, call metadata, typed outcomes, local spawning."""

from __future__ import annotations

from agentrt.server.tools._channel import HostTls
from agentrt.server.tools._router import (
    CallMetadata,
    ToolHostError,
    ToolOutcome,
    ToolRouter,
    host_unsure,
    tool_result_text,
)
from agentrt.server.tools._slots import SlotTimeout, ToolSlots
from agentrt.server.tools._spawn import SpawnedToolHost

__all__ = [
    "CallMetadata",
    "HostTls",
    "SlotTimeout",
    "SpawnedToolHost",
    "ToolHostError",
    "ToolOutcome",
    "ToolRouter",
    "ToolSlots",
    "host_unsure",
    "tool_result_text",
]
