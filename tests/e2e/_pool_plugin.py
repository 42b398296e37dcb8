"""A tool host plugin for the pool tests, loaded by path (``--plugin .../_pool_plugin.py``).

``pool.whoami`` (READ_ONLY) answers with the host's process id and the time it answered, so a
test sees which member of a pool served each call, and when; ``--set pool.version=N`` sets its
version, and ``--set pool.extra=1`` also serves ``pool.extra``: a host restarted with other
options lists other tools. ``pool.guarded`` needs a person's approval for every call.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pydantic

from agentrt.toolhost import SideEffect, Tool, ToolContext, ToolHostConfig, hookimpl, tool


class WhoamiArgs(pydantic.BaseModel):
    """Arguments of pool.whoami."""

    model_config = pydantic.ConfigDict(extra="forbid")

    n: int = 0
    sleep_s: float = pydantic.Field(0.0, ge=0, le=5)


def _whoami(version: str) -> Tool:
    @tool(
        name="pool.whoami",
        description="Say which tool host process answers.",
        side_effect=SideEffect.READ_ONLY,
        idempotent=True,
        concurrency_safe=True,
        timeout=10.0,
        version=version,
    )
    async def whoami(args: WhoamiArgs, ctx: ToolContext) -> dict[str, Any]:
        await asyncio.sleep(args.sleep_s)
        return {"pid": os.getpid(), "version": version, "n": args.n, "at": time.time()}

    return whoami


@tool(
    name="pool.extra",
    description="A tool only some hosts serve.",
    side_effect=SideEffect.READ_ONLY,
    idempotent=True,
    timeout=5.0,
)
def extra(args: WhoamiArgs, ctx: ToolContext) -> dict[str, Any]:
    return {"pid": os.getpid()}


@tool(
    name="pool.guarded",
    description="A tool a person approves each call of.",
    side_effect=SideEffect.READ_ONLY,
    idempotent=True,
    requires_approval=True,
    timeout=5.0,
)
def guarded(args: WhoamiArgs, ctx: ToolContext) -> dict[str, Any]:
    return {"pid": os.getpid()}


@hookimpl
def agentrt_register_tools(config: ToolHostConfig) -> list[Tool]:
    tools = [_whoami(config.options.get("pool.version", "1")), guarded]
    if config.options.get("pool.extra") == "1":
        tools.append(extra)
    return tools
