"""Test tools for fault-injection suites: a tool that always fails transiently.

Load with ``agentrt toolhost --plugin plugins.fault_tools``; not an entry point,
so production hosts never serve it by accident.
"""

from __future__ import annotations

from typing import Any

import pydantic

from tool_host import SideEffect, Tool, ToolContext, ToolHostConfig, TransientError, hookimpl, tool

__all__ = ["FlakyArgs", "agentrt_register_tools", "flaky_transient"]


class FlakyArgs(pydantic.BaseModel):
    """Arguments of flaky.transient."""

    model_config = pydantic.ConfigDict(extra="forbid")
    note: str = ""


@tool(
    name="flaky.transient",
    description="Always fails with a TRANSIENT error (a dependency that stays down).",
    side_effect=SideEffect.READ_ONLY,
    idempotent=True,
    timeout=5.0,
)
async def flaky_transient(args: FlakyArgs, ctx: ToolContext) -> dict[str, Any]:
    """Raise TransientError every time."""
    raise TransientError(f"dependency unavailable (attempt {ctx.attempt})")


@hookimpl
def agentrt_register_tools(config: ToolHostConfig) -> list[Tool]:
    """Register the fault-suite tools."""
    return [flaky_transient]
