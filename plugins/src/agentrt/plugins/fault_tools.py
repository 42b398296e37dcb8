"""Test tools for fault-injection suites.

- ``flaky.transient`` (READ_ONLY): always fails transiently.
- ``slow.write`` (WRITE, async, 10 s timeout): waits ``seconds``, then records its effect; an
  explicit cancel before then stops it cleanly (ToolCancelled, no effect).
- ``slow.write_sync`` (WRITE, sync, 1 s timeout): blocks its thread ``seconds``, then records its
  effect; nothing can stop it once started (what a sync tool is to its host).
- ``slow.write_blocking``: the same with a 10 s timeout (a slow sync write within its deadline).
- ``guarded.write`` (WRITE, async): refuses the runtime's authority (UNAUTHORIZED) until the
  file ``<data_dir>/credentials_ok`` exists (a person fixed the credentials), then writes.
- ``stubborn.write`` (WRITE, async, 30 s timeout): waits ``seconds`` ignoring an explicit cancel,
  then records its effect; only its host's hard stop after the cancel grace cuts it, and then
  nobody can tell what it did (no query hook).

Each effect is one line (the call's idempotency key) in ``<data_dir>/slow_writes.log``; count
them with :func:`count_slow_writes`. Neither write implements the query hook, so the host
reports ``supports_query`` false for them.

Load with ``agentrt toolhost --plugin agentrt.plugins.fault_tools``; not an entry point,
so production hosts never serve it by accident.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pydantic

from agentrt.toolhost import (
    SideEffect,
    Tool,
    ToolCancelled,
    ToolContext,
    ToolHostConfig,
    TransientError,
    Unauthorized,
    hookimpl,
    tool,
)

__all__ = [
    "SLOW_WRITES_FILE",
    "FlakyArgs",
    "SlowWriteArgs",
    "agentrt_register_tools",
    "count_slow_writes",
    "flaky_transient",
    "guarded_write",
    "slow_write",
    "slow_write_blocking",
    "slow_write_sync",
    "stubborn_write",
]

SLOW_WRITES_FILE = "slow_writes.log"
_effects_lock = threading.Lock()  # sync tools write from worker threads


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


class SlowWriteArgs(pydantic.BaseModel):
    """Arguments of slow.write and slow.write_sync."""

    model_config = pydantic.ConfigDict(extra="forbid")
    seconds: float = pydantic.Field(3.0, ge=0, le=30, description="How long the write takes.")
    note: str = ""


def _record_effect(ctx: ToolContext) -> None:
    with _effects_lock, open(ctx.data_dir / SLOW_WRITES_FILE, "a", encoding="utf-8") as log:
        log.write(ctx.idempotency_key + "\n")


def count_slow_writes(data_dir: Path | str, key: str = "") -> int:
    """Effects the slow writes recorded under ``data_dir`` (of ``key`` only, when given)."""
    path = Path(data_dir) / SLOW_WRITES_FILE
    if not path.exists():
        return 0
    keys = path.read_text(encoding="utf-8").split()
    return sum(1 for k in keys if not key or k == key)


@tool(
    name="slow.write",
    description="A write that takes a while; it stops cleanly if cancelled before its effect.",
    side_effect=SideEffect.WRITE,
    timeout=10.0,
)
async def slow_write(args: SlowWriteArgs, ctx: ToolContext) -> dict[str, Any]:
    """Wait ``seconds`` (an explicit cancel stops it first, with no effect), then write."""
    try:
        async with asyncio.timeout(args.seconds):
            await ctx.wait_cancelled()
    except TimeoutError:
        _record_effect(ctx)
        return {"written": args.note, "key": ctx.idempotency_key}
    raise ToolCancelled("stopped on request, before writing anything")


@tool(
    name="slow.write_sync",
    description="A write that blocks its thread for a while; nothing stops it once started.",
    side_effect=SideEffect.WRITE,
    timeout=1.0,
)
def slow_write_sync(args: SlowWriteArgs, ctx: ToolContext) -> dict[str, Any]:
    """Block ``seconds``, then write (a sync tool cannot be interrupted by its host)."""
    time.sleep(args.seconds)
    _record_effect(ctx)
    return {"written": args.note, "key": ctx.idempotency_key, "saw_cancel": ctx.is_cancelled()}


slow_write_blocking = tool(
    name="slow.write_blocking",
    description="A write that blocks its thread for a while, within its deadline; nothing stops it.",
    side_effect=SideEffect.WRITE,
    timeout=10.0,
)(slow_write_sync.fn)


@tool(
    name="stubborn.write",
    description="A write that ignores a request to stop; only its host's hard stop cuts it.",
    side_effect=SideEffect.WRITE,
    timeout=30.0,
)
async def stubborn_write(args: SlowWriteArgs, ctx: ToolContext) -> dict[str, Any]:
    """Wait ``seconds`` whatever happens, then write."""
    await asyncio.sleep(args.seconds)
    _record_effect(ctx)
    return {"written": args.note, "key": ctx.idempotency_key}


@tool(
    name="guarded.write",
    description="A write whose downstream refuses the host's credentials until they are fixed.",
    side_effect=SideEffect.WRITE,
    timeout=10.0,
)
async def guarded_write(args: SlowWriteArgs, ctx: ToolContext) -> dict[str, Any]:
    """UNAUTHORIZED until ``<data_dir>/credentials_ok`` exists; then record the effect."""
    if not (ctx.data_dir / "credentials_ok").exists():
        raise Unauthorized("the payments API refused the host's credentials")
    _record_effect(ctx)
    return {"written": args.note, "key": ctx.idempotency_key}


@hookimpl
def agentrt_register_tools(config: ToolHostConfig) -> list[Tool]:
    """Register the fault-suite tools."""
    return [flaky_transient, slow_write, slow_write_sync, slow_write_blocking, stubborn_write, guarded_write]
