"""Claims racing across processes on one PostgreSQL, through the driver-SQL claim (issue 19).

Each claimer is its own process with its own Store, released at once by a line on stdin. A
further process holds row locks on some runs and is killed with SIGKILL: the claimers skip the
locked rows without waiting (``FOR UPDATE SKIP LOCKED`` survives the driver SQL), and once the
holder is dead those runs are claimable again. Every run goes to exactly one owner, with the
fencing token bumped once per claim; an expired lease is retaken by exactly one of the racers.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from agentrt.server.store import Store
from tests.integration.test_store import run_values

pytestmark = pytest.mark.postgres

NOW = 10**12
TTL = 10_000

CLAIMER = """
import asyncio, json, sys
from agentrt.server.store import Store

async def main(url, owner, now_ms):
    store = await Store.open(url, migrate="off")
    try:
        print("ready", flush=True)
        sys.stdin.readline()
        taken = []
        while claims := await store.claim(owner=owner, now_ms=now_ms, ttl_ms=int(sys.argv[4]), limit=3):
            taken += [[c.run_id, c.generation] for c in claims]
        print(json.dumps(taken), flush=True)
    finally:
        await store.close()

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""

LOCKER = """
import sys, psycopg
conn = psycopg.connect(sys.argv[1])
ids = sys.argv[2].split(",")
conn.execute("SELECT run_id FROM runs WHERE run_id = ANY(%s) FOR UPDATE", [ids]).fetchall()
print("locked", flush=True)
sys.stdin.readline()  # held open until killed
"""


def libpq_url(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


@contextmanager
def processes(*argvs: list[str]) -> Iterator[list[subprocess.Popen[str]]]:
    started = [
        subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for argv in argvs
    ]
    try:
        yield started
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()


def race(url: str, owners: list[str], now_ms: int) -> dict[str, list[tuple[str, int]]]:
    """Start one claimer per owner, release them together; what each took."""
    argvs = [[sys.executable, "-c", CLAIMER, url, owner, str(now_ms), str(TTL)] for owner in owners]
    with processes(*argvs) as claimers:
        for proc in claimers:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        for proc in claimers:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        taken = {}
        for owner, proc in zip(owners, claimers, strict=True):
            out, _ = proc.communicate(timeout=60)  # bounded: a claimer blocked on a lock fails here
            assert proc.returncode == 0, out
            taken[owner] = [(run_id, gen) for run_id, gen in json.loads(out.strip().splitlines()[-1])]
    return taken


async def seed(url: str, count: int) -> None:
    store = await Store.open(url)
    try:
        for i in range(count):
            values = dict(run_values(f"r{i:03d}", owner=None), tenant_id=f"t{i % 3}")
            await store.create_run(values, [("run.started", "{}")], NOW + i)
    finally:
        await store.close()


def test_racing_claimers_take_each_run_once_and_skip_rows_a_killed_holder_had_locked(pg_url: str) -> None:
    asyncio.run(seed(pg_url, 30))
    locked = [f"r{i:03d}" for i in range(8)]
    holder_argv = [sys.executable, "-c", LOCKER, libpq_url(pg_url), ",".join(locked)]
    with processes(holder_argv) as (holder,):
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        first = race(pg_url, ["w0", "w1", "w2"], NOW + 100)
        holder.send_signal(signal.SIGKILL)
        assert holder.wait(timeout=30) == -signal.SIGKILL

    ids = [run_id for taken in first.values() for run_id, _ in taken]
    # Nobody waited on the held rows, nobody took them, and nobody took another run twice.
    assert sorted(ids) == [f"r{i:03d}" for i in range(8, 30)]
    assert all(gen == 1 for taken in first.values() for _, gen in taken)

    # The holder died: its rows are free; still one owner each.
    second = race(pg_url, ["w3", "w4"], NOW + 100)
    assert sorted(run_id for taken in second.values() for run_id, _ in taken) == locked

    # Every lease expired: racers retake each run once, the fencing token bumped exactly once.
    third = race(pg_url, ["w5", "w6", "w7"], NOW + 100 + TTL + 1)
    retaken = sorted((run_id, gen) for taken in third.values() for run_id, gen in taken)
    assert retaken == [(f"r{i:03d}", 2) for i in range(30)]
