"""A test tool whose effects its own store can tell (``supports_query``), for cancel suites.

- ``queryable.write`` (WRITE, async, 30 s timeout): records its effect after ``effect_at_s``, then
  keeps going until ``seconds``, ignoring an explicit cancel; only its host's hard stop after the
  cancel grace cuts it. Its store (one line per effect, the call's idempotency key, in
  ``<data_dir>/queryable_writes.log``) answers the host's ``agentrt_query_operation``: succeeded
  when the effect is there, absent when it is not.

Load with ``agentrt toolhost --plugin agentrt.plugins.queryable_tools``; not an entry point.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pydantic

from agentrt.toolhost import SideEffect, Tool, ToolContext, ToolHostConfig, hookimpl, tool

__all__ = [
    "QUERYABLE_WRITES_FILE",
    "QueryableWriteArgs",
    "agentrt_query_operation",
    "agentrt_register_tools",
    "count_queryable_writes",
    "queryable_write",
]

QUERYABLE_WRITES_FILE = "queryable_writes.log"
_lock = threading.Lock()  # the query hook runs in a worker thread


class QueryableWriteArgs(pydantic.BaseModel):
    """Arguments of queryable.write."""

    model_config = pydantic.ConfigDict(extra="forbid")
    seconds: float = pydantic.Field(10.0, ge=0, le=30, description="How long the call takes in all.")
    effect_at_s: float = pydantic.Field(0.0, ge=0, le=60, description="When its effect happens.")
    note: str = ""


def _effects(data_dir: Path) -> list[str]:
    path = data_dir / QUERYABLE_WRITES_FILE
    with _lock:
        return path.read_text(encoding="utf-8").split() if path.exists() else []


def _record(data_dir: Path, key: str) -> None:
    with _lock, open(data_dir / QUERYABLE_WRITES_FILE, "a", encoding="utf-8") as log:
        log.write(key + "\n")


def count_queryable_writes(data_dir: Path | str, key: str = "") -> int:
    """Effects recorded under ``data_dir`` (of ``key`` only, when given)."""
    return sum(1 for k in _effects(Path(data_dir)) if not key or k == key)


@tool(
    name="queryable.write",
    description="A write that ignores a request to stop, and whose store can tell what it did.",
    side_effect=SideEffect.WRITE,
    timeout=30.0,
)
async def queryable_write(args: QueryableWriteArgs, ctx: ToolContext) -> dict[str, Any]:
    """Record the effect at ``effect_at_s`` (if the call lasts that long), return at ``seconds``."""
    if args.effect_at_s <= args.seconds:
        await asyncio.sleep(args.effect_at_s)
        _record(ctx.data_dir, ctx.idempotency_key)
        await asyncio.sleep(args.seconds - args.effect_at_s)
    else:
        await asyncio.sleep(args.seconds)
    return {"written": args.note, "key": ctx.idempotency_key}


@hookimpl
def agentrt_register_tools(config: ToolHostConfig) -> list[Tool]:
    """Register queryable.write."""
    return [queryable_write]


@hookimpl
def agentrt_query_operation(tool: str, idempotency_key: str, data_dir: Path) -> dict[str, Any] | None:
    """Whether ``queryable.write`` took effect under this key, from its store."""
    if tool != "queryable.write":
        return None
    if idempotency_key in _effects(data_dir):
        return {"status": "succeeded", "result": {"key": idempotency_key, "recovered": True}}
    return {"status": "absent"}
