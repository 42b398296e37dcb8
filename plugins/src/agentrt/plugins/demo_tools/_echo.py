"""``noop.echo``: returns its arguments; the cheapest possible tool, for benchmarks."""

from __future__ import annotations

from typing import Any

import pydantic

from agentrt.toolhost import SideEffect, ToolContext, tool

__all__ = ["EchoArgs", "echo"]


class EchoArgs(pydantic.BaseModel):
    """Any JSON object."""

    model_config = pydantic.ConfigDict(extra="allow")


@tool(
    name="noop.echo",
    description="Return the arguments object unchanged.",
    side_effect=SideEffect.READ_ONLY,
    idempotent=True,
    concurrency_safe=True,
    timeout=5.0,
)
async def echo(args: EchoArgs, ctx: ToolContext) -> dict[str, Any]:
    """Return the arguments (async: no worker thread hop)."""
    return args.model_dump()
