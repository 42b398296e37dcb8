"""Control-flow signals and names shared by the run driver and its steps."""

from __future__ import annotations


class Cancelled(Exception):
    """The in-flight call was cancelled by a cancel request (not by shutdown)."""


class Parked(Exception):
    """The run was handed back to the store to be woken later (reconciliation)."""


# Pseudo-tools the model sees for multi-agent moves (R9.1); never served by a tool host.
HANDOFF_PREFIX = "handoff."
AGENT_TOOL_PREFIX = "agent."
