"""Replica-scaling benchmark: steps/s with 1, 2 and 3 runtime replicas on one PostgreSQL database.

The workload is bench/step_loop.py's (K=5 no-op tool calls per run, 11 steps, one real tool host
process). For each replica count it starts that many runtime processes on a fresh database, sends
``--concurrent`` runs at once spread evenly over the replicas (each run is followed on the replica
that started it, which owns it), ``--bursts`` times, and prints:

- steps/s (the median of the bursts, and their range);
- CPU per step of the runtimes, the tool host, PostgreSQL's backends and this client;
- how busy the machine's cores were over the bursts (/proc/stat), and how much of that was
  these processes (their CPU / wall / cores): on a quiet machine the two agree.

When the cores are near 100% busy, the curve is limited by them, not by the database or the
leases: every replica, the tool host, PostgreSQL and the client share the same cores.

Run: ``python bench/replicas.py`` (``--replicas 1,2,3 --concurrent 120 --bursts 3``).
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from step_loop import PG_ADMIN, STEPS_PER_RUN, WARM_UP_RUNS, cpu_s, one_run, runtime_env

from agentrt.client import AsyncClient
from agentrt.testing import spawn_runtime, spawn_tool_host


def postgres_cpu_s() -> float:
    """CPU seconds of every live PostgreSQL process on this machine (backends of all clients)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            if stat.split(" (", 1)[1].startswith("postgres)"):
                total += cpu_s(int(entry.name))
    return total


def machine_busy_s() -> float:
    """CPU seconds all cores spent not idle since boot (/proc/stat), every process counted."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:8]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")


def client_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def bursts(addresses: list[str], concurrent: int, count: int) -> list[float]:
    """Seconds of each burst of ``concurrent`` runs, spread round-robin over ``addresses``."""
    clients = [AsyncClient(address, timeout=120) for address in addresses]
    async with contextlib.AsyncExitStack() as stack:
        for client in clients:
            await stack.enter_async_context(client)
        for client in clients:
            for _ in range(WARM_UP_RUNS):
                await one_run(client)
        seconds = []
        for _ in range(count):
            begun = time.perf_counter()
            await asyncio.gather(*(one_run(clients[i % len(clients)]) for i in range(concurrent)))
            seconds.append(time.perf_counter() - begun)
    return seconds


def bench_replicas(replicas: int, db_url: str, work: Path, args: argparse.Namespace) -> None:
    with spawn_tool_host(work / f"host-{replicas}", plugins=["agentrt.plugins.demo_tools"]) as host:
        env = runtime_env(db_url, host.address)
        with contextlib.ExitStack() as stack:
            runtimes = [
                stack.enter_context(spawn_runtime(["--listen", "127.0.0.1:0"], cwd=work, env=env))
                for _ in range(replicas)
            ]
            pids = [runtime.process.pid for runtime in runtimes]
            before = ([cpu_s(pid) for pid in pids], cpu_s(host.process.pid), postgres_cpu_s(), client_cpu_s())
            machine = machine_busy_s()
            begun = time.perf_counter()
            seconds = asyncio.run(bursts([r.address for r in runtimes], args.concurrent, args.bursts))
            wall = time.perf_counter() - begun
            machine = machine_busy_s() - machine
            after = ([cpu_s(pid) for pid in pids], cpu_s(host.process.pid), postgres_cpu_s(), client_cpu_s())
    runtime_cpu = sum(after[0]) - sum(before[0])
    parts = {
        "runtimes": runtime_cpu,
        "tool host": after[1] - before[1],
        "postgres": after[2] - before[2],
        "client": after[3] - before[3],
    }
    steps = (WARM_UP_RUNS * replicas + args.concurrent * args.bursts) * STEPS_PER_RUN
    rates = sorted(args.concurrent * STEPS_PER_RUN / s for s in seconds)
    cores = os.cpu_count() or 1
    ours = sum(parts.values()) / wall / cores * 100
    busy = machine / wall / cores * 100
    per_step = ", ".join(f"{name} {cpu * 1000 / steps:.3f}" for name, cpu in parts.items())
    print(
        f"{replicas} replica{'s' if replicas > 1 else ' '}: {statistics.median(rates):6.0f} steps/s "
        f"(bursts {rates[0]:.0f}-{rates[-1]:.0f})  CPU ms/step: {per_step}  "
        f"cores busy {busy:3.0f}% ({ours:.0f}% these processes)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--replicas", default="1,2,3", help="replica counts to run, comma-separated")
    parser.add_argument("--concurrent", type=int, default=120, help="runs in flight, over all replicas")
    parser.add_argument("--bursts", type=int, default=3)
    args = parser.parse_args()
    counts = [int(n) for n in args.replicas.split(",")]
    if not counts or min(counts) < 1:
        parser.error("--replicas takes positive counts, e.g. 1,2,3")
    print(
        f"agentrt replica scaling on PostgreSQL: {STEPS_PER_RUN} steps per run, {args.concurrent} runs "
        f"in flight, one tool host, {os.cpu_count()} cores shared by every process"
    )
    base = PG_ADMIN.rsplit("/", 1)[0]
    with tempfile.TemporaryDirectory(prefix="agentrt-bench-") as tmp:
        for replicas in counts:
            name = f"agentrt_bench_{uuid.uuid4().hex[:8]}"
            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            try:
                bench_replicas(replicas, f"{base}/{name}", Path(tmp), args)
            finally:
                with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
