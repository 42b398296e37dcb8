"""Noisy-neighbour benchmark: what one tenant's load costs another tenant's starts.

Tenant A ("noisy") keeps ``--inflight`` runs in flight from clients in a process of their own:
each run makes ``--a-calls`` calls of a no-op tool served by a real tool host process, with
``--a-think-s`` of model time before each, and every run that ends is replaced at once.
``--history N`` stores N ended runs of A first (what a busy tenant leaves behind). Tenant B
("quiet") starts ``--samples`` runs one after the other (a model step, one tool call, an
answer). For each of B's runs it times:

- the StartRun reply (from the call to its answer),
- the first step event (from the StartRun call to the first event after ``run.started`` on a
  StreamRunEvents follow: the moment a worker took the run's first step).

Both are measured unloaded (A idle) and loaded (A's runs in flight), on SQLite (WAL,
synchronous=FULL) and PostgreSQL, with real gRPC over loopback and bearer-token tenants.

Run: ``python bench/noisy_neighbour.py`` (``--backend sqlite`` or ``postgres`` for one). Run it
with another checkout's interpreter to measure that checkout. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.synchronize import Event
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentrt.client import AsyncClient, RPCError  # noqa: E402
from agentrt.testing import spawn_runtime, spawn_tool_host  # noqa: E402

PG_ADMIN = os.environ.get("AGENTRT_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
TENANTS = ("noisy", "quiet")
RAMP_S = 0.01  # between the starts of A's first runs


def runtime_env(
    work: Path, *, db_url: str, tool_host: str, a_calls: int, a_think_s: float, max_concurrent_runs: int
) -> dict[str, str]:
    """The runtime's config as AGENTRT_* variables: two tenants with a bearer token each, a busy
    agent (A's) and a probe agent (B's)."""
    tokens = work / "tokens.toml"
    tokens.write_text(
        "".join(
            f'[[tokens]]\nsha256 = "{hashlib.sha256(token(t).encode()).hexdigest()}"\n'
            f'subject = "{t}-runner"\ntenant = "{t}"\nroles = ["runner"]\n'
            for t in TENANTS
        )
    )
    think = {"delay_s": a_think_s} if a_think_s else {}
    busy = [{"tool_calls": [{"tool": "noop.echo", "arguments": {"i": i}}], **think} for i in range(a_calls)]
    probe = [{"tool_calls": [{"tool": "noop.echo", "arguments": {"probe": True}}]}, {"text": "done"}]

    def agent(steps: list[dict[str, object]]) -> dict[str, object]:
        return {
            "tools": ["noop.echo"],
            "model": {"provider": "scripted", "options": {"steps": steps}},
            "budgets": {"max_model_steps": len(steps), "timeout_s": 300},
        }

    return dict(
        os.environ,
        AGENTRT_DB_URL=db_url,
        AGENTRT_MAX_CONCURRENT_RUNS=str(max_concurrent_runs),
        AGENTRT_AUTH__TOKENS_FILE=str(tokens),
        AGENTRT_TOOL_HOSTS=json.dumps([{"name": "bench", "address": tool_host}]),
        AGENTRT_AGENTS=json.dumps({"busy": agent([*busy, {"text": "done"}]), "probe": agent(probe)}),
    )


def token(tenant: str) -> str:
    return f"bench-token-{tenant}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    start_s: float  # the StartRun reply
    first_event_s: float  # the first event after run.started


async def probe(client: AsyncClient) -> Sample:
    """One of B's runs: StartRun, then follow until its first step event (then until its end)."""
    begun = time.perf_counter()
    run = await client.start_run("probe", "go")
    started = time.perf_counter() - begun
    first = None
    async with client.stream_events(run.run_id, after_seq=1, follow=True) as events:
        async for _event in events:
            if first is None:
                first = time.perf_counter() - begun
    assert first is not None
    return Sample(start_s=started, first_event_s=first)


async def keep_in_flight(address: str, inflight: int, ready: Event, stop: Event) -> None:
    """Keep ``inflight`` of A's runs going, each replaced when it ends, until ``stop`` is set.

    ``ready`` is set once ``inflight`` runs have sent their first event.
    """
    started = 0
    refused: list[str] = []

    async def keep_one(client: AsyncClient, index: int) -> None:
        nonlocal started
        # A ramp, not a stampede of 200 calls at once: the figures are of a steady load.
        await asyncio.sleep(index * RAMP_S)
        while not stop.is_set():
            try:
                async with client.run_agent("busy", "go") as stream:
                    seen = False
                    async for _event in stream:
                        if not seen:
                            seen = True
                            started += 1
                            if started == inflight:
                                ready.set()
                        if stop.is_set():
                            break
            except RPCError as exc:  # counted and shown: a noisy tenant's refusals are figures too
                refused.append(exc.code.name)
                await asyncio.sleep(1.0)

    async with AsyncClient(address, timeout=60, token=token("noisy")) as client:
        tasks = [asyncio.create_task(keep_one(client, i)) for i in range(inflight)]
        await asyncio.to_thread(stop.wait)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    if refused:
        counts = {code: refused.count(code) for code in sorted(set(refused))}
        print(f"tenant A's streams that failed: {counts}", flush=True)


def noisy_process(address: str, inflight: int, ready: Event, stop: Event) -> None:
    """Tenant A's clients in a process of their own: their work must not slow B's client."""
    asyncio.run(keep_in_flight(address, inflight, ready, stop))


@contextlib.contextmanager
def noisy_load(address: str, inflight: int) -> Iterator[None]:
    """Tenant A keeps ``inflight`` runs in flight while the body runs."""
    context = multiprocessing.get_context("spawn")
    ready, stop = context.Event(), context.Event()
    process = context.Process(target=noisy_process, args=(address, inflight, ready, stop), daemon=True)
    process.start()
    try:
        if not ready.wait(timeout=180):
            raise RuntimeError(f"tenant A did not get {inflight} runs going within 180 s")
        yield
    finally:
        stop.set()
        process.join(timeout=30)
        if process.is_alive():
            process.kill()


async def probes(address: str, samples: int) -> list[Sample]:
    async with AsyncClient(address, timeout=60, token=token("quiet")) as quiet:
        for _ in range(3):  # warm-up: imports, caches, connection pools
            await probe(quiet)
        return [await probe(quiet) for _ in range(samples)]


def measure(address: str, *, samples: int, inflight: int) -> tuple[list[Sample], list[Sample]]:
    unloaded = asyncio.run(probes(address, samples))
    with noisy_load(address, inflight):
        loaded = asyncio.run(probes(address, samples))
    return unloaded, loaded


def figures(name: str, values: list[float]) -> str:
    ordered = sorted(values)
    p50 = statistics.median(ordered)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return (
        f"{name:<22} p50 {p50 * 1000:8.1f} ms   p95 {p95 * 1000:8.1f} ms   max {ordered[-1] * 1000:8.1f} ms"
    )


def add_history(db_url: str, count: int) -> None:
    """``count`` ended runs of tenant A, as a busy tenant leaves behind (written straight to the table)."""
    from sqlalchemy import create_engine, insert

    from agentrt.server.store import migrate, normalise_url
    from agentrt.server.store._schema import runs

    url = normalise_url(db_url)
    migrate(url)
    engine = create_engine(url)
    now_ms = int(time.time() * 1000) - 86_400_000
    row: dict[str, object] = {
        "tenant_id": "noisy",
        "agent_name": "busy",
        "agent_spec": "{}",
        "input": "go",
        "output": "done",
        "reason": "final_answer",
        "phase": "COMPLETED",
        "revision": 3,
        "last_seq": 3,
        "budgets": "{}",
        "usage": "{}",
        "metadata": "{}",
        "deadline_ms": now_ms,
        "updated_ms": now_ms,
        "lease_generation": 1,
        "state_version": 1,
        "runtime_version": "0",
        "agent_config_hash": "h",
        "session_id": None,
    }
    try:
        with engine.begin() as conn:
            for start in range(0, count, 5000):
                batch = [
                    dict(row, run_id=f"{now_ms + i:012x}{uuid.uuid4().hex[:20]}", created_ms=now_ms + i)
                    for i in range(start, min(count, start + 5000))
                ]
                conn.execute(insert(runs), batch)
    finally:
        engine.dispose()


def bench_backend(name: str, db_url: str, work: Path, args: argparse.Namespace) -> None:
    if args.history:
        add_history(db_url, args.history)
    with spawn_tool_host(work / f"host-{name}", plugins=["agentrt.plugins.demo_tools"]) as host:
        env = runtime_env(
            work,
            db_url=db_url,
            tool_host=host.address,
            a_calls=args.a_calls,
            a_think_s=args.a_think_s,
            max_concurrent_runs=args.max_concurrent_runs,
        )
        with spawn_runtime(["--listen", "127.0.0.1:0"], cwd=work, env=env) as runtime:
            unloaded, loaded = measure(runtime.address, samples=args.samples, inflight=args.inflight)
    print(
        f"\n== {name}: tenant B, {args.samples} runs each; loaded = tenant A keeps {args.inflight} in flight"
    )
    for label, group in (("unloaded", unloaded), ("loaded", loaded)):
        print(figures(f"StartRun {label}", [s.start_s for s in group]))
        print(figures(f"first event {label}", [s.first_event_s for s in group]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--inflight", type=int, default=200, help="tenant A's runs in flight")
    parser.add_argument("--a-calls", type=int, default=20, help="tool calls per run of tenant A")
    parser.add_argument("--a-think-s", type=float, default=0.0, help="model time of each of A's steps")
    parser.add_argument("--history", type=int, default=0, help="ended runs of A already stored")
    parser.add_argument("--samples", type=int, default=40, help="tenant B's runs per phase")
    parser.add_argument("--max-concurrent-runs", type=int, default=512)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentrt-noisy-") as tmp:
        root = Path(tmp)
        if args.backend in ("sqlite", "both"):
            work = root / "sqlite"
            work.mkdir()
            bench_backend("SQLite", f"sqlite:///{work / 'agentrt.sqlite'}", work, args)
        if args.backend in ("postgres", "both"):
            database = f"agentrt_noisy_{uuid.uuid4().hex[:8]}"
            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{database}"')
            try:
                work = root / "postgres"
                work.mkdir()
                bench_backend("PostgreSQL", f"{PG_ADMIN.rsplit('/', 1)[0]}/{database}", work, args)
            finally:
                with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


if __name__ == "__main__":
    main()
