"""Tool host client: routing, call metadata, typed outcomes, local spawning."""

from __future__ import annotations

from agentrt.server.core import ToolOutcome
from agentrt.server.tools._channel import HostChannel, HostTls
from agentrt.server.tools._router import (
    CallMetadata,
    ToolHostError,
    ToolHostUnreachable,
    ToolRouter,
    host_failure,
)
from agentrt.server.tools._slots import SlotTimeout, ToolSlots
from agentrt.server.tools._spawn import SpawnedToolHost

__all__ = [
    "CallMetadata",
    "HostChannel",
    "HostTls",
    "SlotTimeout",
    "SpawnedToolHost",
    "ToolHostError",
    "ToolHostUnreachable",
    "ToolOutcome",
    "ToolRouter",
    "ToolSlots",
    "host_failure",
]
