"""Test tools for fault-injection suites: a tool that always fails transiently.

Load with ``agentrt toolhost --plugin agentrt.plugins.fault_tools``; not an entry point,
so production hosts never serve it by accident.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pydantic

from agentrt.toolhost import SideEffect, Tool, ToolContext, ToolHostConfig, TransientError, hookimpl, tool

__all__ = ["FlakyArgs", "agentrt_register_tools", "flaky_transient"]


class FlakyArgs(pydantic.BaseModel):
    """Arguments of flaky.transient."""

    model_config = pydantic.ConfigDict(extra="forbid")
    note: str = ""
    delay_s: float = pydantic.Field(0.0, ge=0, le=30, description="How long each attempt takes to fail.")


@tool(
    name="flaky.transient",
    description="Always fails with a TRANSIENT error (a dependency that stays down).",
    side_effect=SideEffect.READ_ONLY,
    idempotent=True,
    timeout=5.0,
)
async def flaky_transient(args: FlakyArgs, ctx: ToolContext) -> dict[str, Any]:
    """Raise TransientError every time, after ``delay_s``."""
    if args.delay_s:
        await asyncio.sleep(args.delay_s)
    raise TransientError(f"dependency unavailable (attempt {ctx.attempt})")


@hookimpl
def agentrt_register_tools(config: ToolHostConfig) -> list[Tool]:
    """Register the fault-suite tools."""
    return [flaky_transient]
