"""A counting MCP server for tests: ``python -m agentrt.testing.mcp_server --store DIR``.

Written with the official ``mcp`` SDK (``agentrt-testing[mcp]``). It serves three tools:

- ``lookup`` (``readOnlyHint``): returns the value for a key, and the server's pid;
- ``record`` (``destructiveHint: false``): a write that counts its raw executions in the store;
- ``fail``: always answers ``isError``.

The store directory is the test's window into the server:

- ``calls.sqlite``: one row per tool execution (``tool``, ``phase`` started/done, the ``_meta``
  ``traceparent`` and ``io.agentrt/idempotency-key`` it saw), written with ``synchronous=FULL``;
  :func:`executions` and :func:`seen_meta` read it;
- ``pid``: the serving process's id, so a test can kill it (:func:`server_pid`);
- ``hold``: while this file exists, ``record`` records "started" and then waits until ``release``
  exists. A test kills a process mid-write deterministically: create ``hold``, wait for the
  started row (:func:`wait_for_started`), kill;
- ``definition-v2``: read at startup; when present, ``lookup``'s description differs (a changed
  tool definition, for the rug-pull guard).

Transports: ``--transport stdio`` (the default) or ``--transport http --port N`` (Streamable HTTP
on ``127.0.0.1:N`` at ``/mcp``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "HOLD_POLL_S",
    "IDEMPOTENCY_META_KEY",
    "connect_store",
    "executions",
    "main",
    "seen_meta",
    "server_pid",
    "wait_for_started",
]

IDEMPOTENCY_META_KEY = "io.agentrt/idempotency-key"
"""The ``_meta`` key under which the tool host sends a call's idempotency key."""

_DB = "calls.sqlite"
HOLD_POLL_S = 0.02  # how often a held write looks for the release file


@contextlib.contextmanager
def connect_store(store: Path) -> Iterator[sqlite3.Connection]:
    """The store's database (created on first use); closed when the block ends."""
    conn = sqlite3.connect(store / _DB, timeout=10, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous=FULL")  # a row written is on disk before the tool goes on
        conn.execute(
            "CREATE TABLE IF NOT EXISTS calls (seq INTEGER PRIMARY KEY, tool TEXT, phase TEXT,"
            " traceparent TEXT, idempotency_key TEXT, arguments TEXT, pid INTEGER)"
        )
        yield conn
    finally:
        conn.close()


def executions(store: Path, tool: str = "record", *, phase: str | None = None) -> int:
    """Raw executions of ``tool`` the server started (or, with ``phase="done"``, finished)."""
    if not (store / _DB).exists():
        return 0
    with connect_store(store) as conn:
        if phase is None:
            row = conn.execute("SELECT COUNT(*) FROM calls WHERE tool = ?", (tool,)).fetchone()
        else:
            query = "SELECT COUNT(*) FROM calls WHERE tool = ? AND phase = ?"
            row = conn.execute(query, (tool, phase)).fetchone()
    return int(row[0])


def seen_meta(store: Path) -> list[dict[str, Any]]:
    """``{"tool", "traceparent", "idempotency_key"}`` of every execution, oldest first."""
    if not (store / _DB).exists():
        return []
    with connect_store(store) as conn:
        rows = conn.execute("SELECT tool, traceparent, idempotency_key FROM calls ORDER BY seq").fetchall()
    return [{"tool": t, "traceparent": tp, "idempotency_key": key} for t, tp, key in rows]


def server_pid(store: Path) -> int:
    """The pid of the server process serving from ``store`` now (0 when none wrote it yet)."""
    try:
        return int((store / "pid").read_text())
    except (OSError, ValueError):
        return 0


def wait_for_started(store: Path, tool: str = "record", *, count: int = 1, timeout: float = 30.0) -> None:
    """Block until ``count`` executions of ``tool`` started (polled, bounded by ``timeout``)."""
    deadline = time.monotonic() + timeout
    while executions(store, tool) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{tool} did not start {count} time(s) within {timeout}s")
        time.sleep(0.02)


def _build(store: Path) -> Any:
    # Imported here: the helpers above need no mcp SDK (tests read stores without the extra).
    from agentrt.testing._mcp_app import build_server

    return build_server(store)


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until stdin closes (stdio) or the process is stopped (http)."""
    parser = argparse.ArgumentParser(prog="python -m agentrt.testing.mcp_server")
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--store", type=Path, required=True)
    args = parser.parse_args(argv)
    store: Path = args.store
    store.mkdir(parents=True, exist_ok=True)
    (store / "pid").write_text(str(os.getpid()))
    server = _build(store)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.port)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
