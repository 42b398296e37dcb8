"""Store micro-benchmark (issue 19): what create_run, read_events and claim cost per call.

For SQLite (WAL, synchronous=FULL) and PostgreSQL, N calls of each, sequential: the
statements of each call as SQLAlchemy ``Connection.execute`` of the Core expressions (the path
the store took before) and as driver SQL (``store/_fast_sql.py``, what it takes now),
interleaved call by call on the same database; then N calls of the Store's own methods. µs per
op of wall time and of this process's CPU. The CPU is the figure
issue 19 is about (the runtime's event loop); the wall time includes the database's own work.

Run: ``python bench/store_ops.py --n 2000`` (``--backend sqlite|postgresql`` for one only).
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import Connection, insert

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentrt.server.store import Store  # noqa: E402
from agentrt.server.store._claims import RUNS  # noqa: E402
from agentrt.server.store._fast_sql import driver_statement, insert_events, insert_run  # noqa: E402
from agentrt.server.store._schema import events, runs  # noqa: E402
from agentrt.server.store._store import _BY_REQUEST_KEY, _EVENTS_AFTER  # noqa: E402

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
NOW = 10**12
EVENTS_PER_READ = 5
WARM_UP = 20
PATHS = ("core", "driver", "store")
OPS = ("create_run", "read_events", "claim")


def run_values(run_id: str, key: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "tenant_id": f"t{hash(run_id) % 4}",
        "agent_name": "a",
        "agent_spec": "{}",
        "input": "hi",
        "phase": "QUEUED",
        "budgets": "{}",
        "usage": "{}",
        "request_key": key,
        "session_id": None,
        "metadata": "{}",
        "deadline_ms": 10**13,
        "lease_owner": None,
        "lease_expires_ms": None,
        "cancel_requested_ms": None,
        "cancel_reason": None,
        "state_version": 1,
        "runtime_version": "0",
        "agent_config_hash": "h",
    }


class Clock:
    """Wall and CPU time of this process spent in the calls timed, in µs."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0
        self.calls = 0

    async def time(self, call: Awaitable[Any]) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        await call
        self.wall += time.perf_counter() - wall
        self.cpu += time.process_time() - cpu
        self.calls += 1

    def per_op(self) -> str:
        n = max(self.calls, 1)
        return f"{self.wall / n * 1e6:8.1f} / {self.cpu / n * 1e6:7.1f}"


def core_create(store: Store, run_id: str, key: str) -> Awaitable[Any]:
    """create_run's statements as Connection.execute of Core."""
    row = dict(run_values(run_id, key), output="", reason="", lease_generation=0)
    row.update(revision=1, last_seq=1, created_ms=NOW, updated_ms=NOW)
    first = [{"run_id": run_id, "seq": 1, "type": "run.started", "payload": "{}", "created_ms": NOW}]

    def write(conn: Connection) -> None:
        conn.execute(_BY_REQUEST_KEY, {"tenant_id": row["tenant_id"], "request_key": key}).first()
        conn.execute(insert(runs), row)
        conn.execute(insert(events), first)

    return store.db.transaction(write)


def driver_create(store: Store, run_id: str, key: str) -> Awaitable[Any]:
    """The same statements as driver SQL (what create_run now sends)."""
    row = dict(run_values(run_id, key), revision=1, last_seq=1, created_ms=NOW, updated_ms=NOW)
    first = [{"run_id": run_id, "seq": 1, "type": "run.started", "payload": "{}", "created_ms": NOW}]

    def write(conn: Connection) -> None:
        by_key = driver_statement(_BY_REQUEST_KEY, conn.dialect)
        by_key.execute(conn, {"tenant_id": row["tenant_id"], "request_key": key}).first()
        insert_run(conn, row)
        insert_events(conn, first)

    return store.db.transaction(write)


def core_claim(store: Store, owner: str) -> Awaitable[Any]:
    def write(conn: Connection) -> None:
        params = {"now_ms": NOW + 1, "limit": 1}
        found = list(conn.execute(RUNS.candidates, params).scalars())
        if found:
            take = {**params, "taken": found, "owner": owner, "expires_ms": NOW + 10**9}
            conn.execute(RUNS.take, take).all()

    return store.db.transaction(write)


def driver_claim(store: Store, owner: str) -> Awaitable[Any]:
    params = {"now_ms": NOW + 1, "limit": 1}
    return store.db.transaction(lambda conn: RUNS.run(conn, params, owner=owner, expires_ms=NOW + 10**9))


async def bench(url: str, n: int) -> None:
    store = await Store.open(url)
    clocks = {(path, op): Clock() for path in PATHS for op in OPS}
    try:
        reader = "reader"
        await store.create_run(run_values(reader, "reader"), [("x", "{}")] * EVENTS_PER_READ, NOW)
        read = {"run_id": reader, "after_seq": 0, "limit": 1000}

        def driver_read(conn: Connection) -> Any:
            return driver_statement(_EVENTS_AFTER, conn.dialect).execute(conn, read).all()

        # Interleaved, so both paths meet the same moments of the machine and the same number
        # of queued runs; the first WARM_UP of each are not counted (imports, pools, caches).
        for i in range(n + WARM_UP):
            clock = (lambda p, o: clocks[p, o]) if i >= WARM_UP else (lambda p, o: Clock())
            await clock("core", "create_run").time(core_create(store, f"c{i:07d}", f"kc{i}"))
            await clock("driver", "create_run").time(driver_create(store, f"d{i:07d}", f"kd{i}"))
            await clock("core", "read_events").time(
                store.db.read(lambda c: c.execute(_EVENTS_AFTER, read).all())
            )
            await clock("driver", "read_events").time(store.db.read(driver_read))
        for i in range(n + WARM_UP):
            clock = (lambda p, o: clocks[p, o]) if i >= WARM_UP else (lambda p, o: Clock())
            await clock("core", "claim").time(core_claim(store, "bench"))
            await clock("driver", "claim").time(driver_claim(store, "bench"))
        # The Store's own calls (statements plus sealing, records, admission-free create).
        for i in range(n):
            await clocks["store", "create_run"].time(
                store.create_run(run_values(f"s{i:07d}", f"ks{i}"), [("run.started", "{}")], NOW)
            )
            await clocks["store", "read_events"].time(store.read_events(reader))
        for _ in range(n):
            await clocks["store", "claim"].time(
                store.claim(owner="bench", now_ms=NOW + 1, ttl_ms=10**9, limit=1)
            )
    finally:
        await store.close()
    print(f"{store.dialect}, n={n}: µs per op, wall / CPU of this process")
    print(f"  {'':12s} {'Core execute':>18s} {'driver SQL':>18s} {'Store call':>18s}")
    for op in OPS:
        cells = "  ".join(clocks[path, op].per_op() for path in PATHS)
        print(f"  {op:12s} {cells}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--pg-admin", default=PG_ADMIN)
    args = parser.parse_args()
    if args.backend in ("sqlite", "both"):
        with tempfile.TemporaryDirectory() as tmp:
            await bench(f"sqlite:///{Path(tmp) / 'bench.sqlite'}", args.n)
    if args.backend in ("postgresql", "both"):
        name = f"bench_store_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(args.pg_admin, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        try:
            await bench(args.pg_admin.rsplit("/", 1)[0] + f"/{name}", args.n)
        finally:
            with psycopg.connect(args.pg_admin, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


if __name__ == "__main__":
    asyncio.run(main())
