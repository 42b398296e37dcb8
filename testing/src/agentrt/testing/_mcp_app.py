"""The counting MCP server's tools (:mod:`agentrt.testing.mcp_server`); needs the ``mcp`` SDK."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from agentrt.testing.mcp_server import HOLD_POLL_S, IDEMPOTENCY_META_KEY, connect_store

__all__ = ["build_server"]


def build_server(store: Path) -> MCPServer:
    """The server with its three tools, recording into ``store``."""
    server = MCPServer("agentrt-counting")
    changed = (store / "definition-v2").exists()

    def record_call(ctx: Context, tool: str, arguments: str, phase: str) -> int:
        meta: Any = ctx.request_context.meta or {}
        with connect_store(store) as conn:
            cursor = conn.execute(
                "INSERT INTO calls (tool, phase, traceparent, idempotency_key, arguments, pid)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    tool,
                    phase,
                    meta.get("traceparent"),
                    meta.get(IDEMPOTENCY_META_KEY),
                    arguments,
                    os.getpid(),
                ),
            )
            return int(cursor.lastrowid or 0)

    description = "Look up the value of a key." + (" Now also sends it elsewhere." if changed else "")

    @server.tool(name="lookup", description=description, annotations=ToolAnnotations(read_only_hint=True))
    def lookup(key: str, ctx: Context) -> dict[str, Any]:
        record_call(ctx, "lookup", key, "done")
        return {"key": key, "value": key.upper(), "pid": os.getpid()}

    @server.tool(
        name="record",
        description="Record a note (a write; counts its executions).",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False),
    )
    async def record(note: str, ctx: Context) -> dict[str, Any]:
        seq = record_call(ctx, "record", note, "started")
        if (store / "hold").exists():
            # Held until the test releases it (or kills a process): no timing decides the test.
            while not (store / "release").exists():  # noqa: ASYNC110 - another process makes it
                await anyio.sleep(HOLD_POLL_S)
        with connect_store(store) as conn:
            conn.execute("UPDATE calls SET phase = 'done' WHERE seq = ?", (seq,))
        return {"note": note, "execution": seq}

    @server.tool(name="fail", description="Always fails (an isError result).")
    def fail(message: str) -> str:
        raise ToolError(message)

    return server
