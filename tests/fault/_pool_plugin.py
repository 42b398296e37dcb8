"""A write tool for the tool host pool tests, loaded with ``--plugin`` into real host processes.

``pool.charge`` records its effect in the plugin's own SQLite store (``--set store=PATH``), one
row per raw execution, then holds until the file ``--set release=PATH`` exists (at most
``--set hold_s=S`` seconds, 60 by default), so a test can have it in flight on one host, or kill
that host mid-write after the effect. Its query hook
answers from the same store, so any host of the pool can settle a call another host left.

``pool.peek`` is a read: each raw execution is a row naming the member that served it
(``--set member=NAME``), so a test sees a restarted member serving again, and counts reads.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pydantic

from agentrt.toolhost import SideEffect, Tool, ToolContext, ToolHostConfig, hookimpl, tool


class ChargeArgs(pydantic.BaseModel):
    order_id: str
    amount: float


class PeekArgs(pydantic.BaseModel):
    order_id: str


def _store(config: ToolHostConfig) -> sqlite3.Connection:
    db = sqlite3.connect(config.options["store"], timeout=10, isolation_level=None)
    db.execute("CREATE TABLE IF NOT EXISTS charges (key TEXT NOT NULL, order_id TEXT NOT NULL)")
    db.execute("CREATE TABLE IF NOT EXISTS peeks (key TEXT NOT NULL, member TEXT NOT NULL, at REAL NOT NULL)")
    return db


@hookimpl
def agentrt_register_tools(config: ToolHostConfig) -> list[Tool]:
    release = Path(config.options["release"])
    hold_s = float(config.options.get("hold_s", 60))

    def charge(args: ChargeArgs, ctx: ToolContext) -> dict[str, Any]:
        db = _store(config)
        try:
            db.execute(
                "INSERT INTO charges (key, order_id) VALUES (?, ?)", (ctx.idempotency_key, args.order_id)
            )
        finally:
            db.close()
        # Held after the effect until the test lets go (bounded, should the test never do so).
        give_up = time.monotonic() + hold_s
        while not release.exists() and not ctx.cancelled.is_set() and time.monotonic() < give_up:
            time.sleep(0.01)
        return {"charged": args.order_id}

    member = str(config.options.get("member", ""))

    async def peek(args: PeekArgs, ctx: ToolContext) -> dict[str, Any]:
        db = _store(config)
        try:
            db.execute(
                "INSERT INTO peeks (key, member, at) VALUES (?, ?, ?)",
                (ctx.idempotency_key, member, time.time()),
            )
        finally:
            db.close()
        return {"order_id": args.order_id, "member": member}

    return [
        tool(
            name="pool.charge",
            description="Charge an order once.",
            side_effect=SideEffect.WRITE,
            supports_query=True,
        )(charge),
        tool(
            name="pool.peek",
            description="Look at an order.",
            side_effect=SideEffect.READ_ONLY,
            idempotent=True,
        )(peek),
    ]


@hookimpl
def agentrt_query_operation(tool: str, idempotency_key: str, config: ToolHostConfig) -> dict[str, Any] | None:
    if tool != "pool.charge":
        return None
    db = _store(config)
    try:
        row = db.execute("SELECT order_id FROM charges WHERE key = ?", (idempotency_key,)).fetchone()
    finally:
        db.close()
    return {"status": "succeeded", "result": {"charged": row[0]}} if row else {"status": "absent"}


def charges(store: Path, key: str) -> int:
    """Raw executions of ``pool.charge`` under ``key``, as the plugin's own store counts them."""
    if not store.exists():
        return 0
    db = sqlite3.connect(store, timeout=10)
    try:
        # The file may exist a moment before its table does (the plugin creates both).
        db.execute("CREATE TABLE IF NOT EXISTS charges (key TEXT NOT NULL, order_id TEXT NOT NULL)")
        return int(db.execute("SELECT count(*) FROM charges WHERE key = ?", (key,)).fetchone()[0])
    finally:
        db.close()


def charge_counts(store: Path) -> dict[str, int]:
    """Raw executions of ``pool.charge`` per idempotency key, as the plugin's own store counts them."""
    if not store.exists():
        return {}
    db = sqlite3.connect(store, timeout=10)
    try:
        db.execute("CREATE TABLE IF NOT EXISTS charges (key TEXT NOT NULL, order_id TEXT NOT NULL)")
        return dict(db.execute("SELECT key, count(*) FROM charges GROUP BY key").fetchall())
    finally:
        db.close()


def peeks_by(store: Path, member: str, *, since: float = 0.0) -> int:
    """Raw executions of ``pool.peek`` that ``member`` served at or after epoch second ``since``."""
    if not store.exists():
        return 0
    db = sqlite3.connect(store, timeout=10)
    try:
        db.execute(
            "CREATE TABLE IF NOT EXISTS peeks (key TEXT NOT NULL, member TEXT NOT NULL, at REAL NOT NULL)"
        )
        row = db.execute(
            "SELECT count(*) FROM peeks WHERE member = ? AND at >= ?", (member, since)
        ).fetchone()
        return int(row[0])
    finally:
        db.close()
