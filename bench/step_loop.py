"""Step-loop benchmark: what one agent step costs, against the floor of one bare commit.

A scripted agent makes K=5 calls of a no-op tool served by a real tool host
process (11 steps per run: 6 model steps, 5 tool steps). For SQLite (WAL,
synchronous=FULL) and PostgreSQL it prints:

- per-run p50/p99 and per-step time over 200 sequential runs,
- steps/s with 100 runs in flight at once (the median of 5 such bursts, and their range),
- the runtime process's peak RSS,
- the floor: one bare INSERT + COMMIT per step on the same database.

Run: ``make bench`` (or ``python bench/step_loop.py --runs 200 --concurrent 100 --bursts 5``).
``--encrypt`` turns on payload encryption at rest (a fresh key file, ``[encryption] key_file``).
``--tracing`` runs each backend again with tracing on in the runtime and the tool host (100%
sampling, OTLP/gRPC to agentrt.testing's receiver in a process of its own, set by OTEL_*
variables alone, on a fresh database) and prints the per-step time with tracing off against on
(issue 17 targets <= +10%).
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentrt.client import AsyncClient  # noqa: E402
from agentrt.testing import spawn_runtime, spawn_tool_host  # noqa: E402
from agentrt.toolhost.security import write_key_file  # noqa: E402

K = 5
STEPS_PER_RUN = 2 * K + 1
WARM_UP_RUNS = 10  # imports, caches, connection pools; counted in CPU per step, not in the timings
PG_ADMIN = os.environ.get("AGENTRT_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def floor_sqlite(path: Path, n: int) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS floor (id INTEGER PRIMARY KEY, payload TEXT)")
    begun = time.perf_counter()
    for i in range(n):
        conn.execute("BEGIN")
        conn.execute("INSERT INTO floor (payload) VALUES (?)", (f"event {i}",))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - begun
    conn.close()
    return elapsed / n


def floor_postgres(url: str, n: int) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS floor (id BIGSERIAL PRIMARY KEY, payload TEXT)")
        begun = time.perf_counter()
        for i in range(n):
            conn.execute("INSERT INTO floor (payload) VALUES (%s)", (f"event {i}",))
        return (time.perf_counter() - begun) / n


def runtime_env(db_url: str, tool_host: str, *, key_file: Path | None = None) -> dict[str, str]:
    """The whole runtime config as AGENTRT_* variables (values that parse as JSON are JSON)."""
    steps = [{"tool_calls": [{"tool": "noop.echo", "arguments": {"i": i}}]} for i in range(K)]
    agent = {
        "tools": ["noop.echo"],
        "model": {"provider": "scripted", "options": {"steps": [*steps, {"text": "done"}]}},
        "budgets": {"max_model_steps": K + 1, "timeout_s": 120},
    }
    env = dict(
        os.environ,
        AGENTRT_DB_URL=db_url,
        AGENTRT_MAX_CONCURRENT_RUNS="512",
        AGENTRT_TOOL_HOSTS=json.dumps([{"name": "bench", "address": tool_host}]),
        AGENTRT_AGENTS=json.dumps({"bench": agent}),
    )
    if key_file is not None:
        env["AGENTRT_ENCRYPTION__KEY_FILE"] = str(key_file)
    return env


async def one_run(client: AsyncClient) -> float:
    begun = time.perf_counter()
    last = None
    async for event in client.run_agent("bench", "go"):
        last = event
    assert last is not None and last.HasField("run_ended") and last.run_ended.phase == 8, last
    return time.perf_counter() - begun


async def measure(
    address: str, runs: int, concurrent: int, bursts: int, **client_options: str
) -> tuple[list[float], list[float]]:
    """Per-run seconds of ``runs`` sequential runs, and seconds of each burst of ``concurrent`` runs."""
    async with AsyncClient(address, timeout=60, **client_options) as client:  # type: ignore[arg-type]
        for _ in range(WARM_UP_RUNS):
            await one_run(client)
        sequential = [await one_run(client) for _ in range(runs)]
        seconds = []
        for _ in range(bursts):
            begun = time.perf_counter()
            await asyncio.gather(*(one_run(client) for _ in range(concurrent)))
            seconds.append(time.perf_counter() - begun)
    return sequential, seconds


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a live process has used (less sensitive to a noisy box than wall time)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def bench_backend(
    name: str,
    db_url: str,
    floor_s: float,
    work: Path,
    args: argparse.Namespace,
    *,
    otel: dict[str, str] | None = None,
) -> tuple[float, float]:
    """Print the backend's figures; returns its mean seconds per step (sequential runs) and the
    runtime's and tool host's CPU milliseconds per step."""
    key_file = None
    if args.encrypt:
        key_file = work / "keys.json"
        write_key_file(key_file)
    # The tool host inherits this process's environment: OTEL_* reach it (and the runtime) so.
    saved = {key: os.environ.get(key) for key in otel or {}}
    os.environ.update(otel or {})
    try:
        with spawn_tool_host(
            work / f"host-{uuid.uuid4().hex[:8]}", plugins=["agentrt.plugins.demo_tools"]
        ) as host:
            env = runtime_env(db_url, host.address, key_file=key_file)
            with spawn_runtime(["--listen", "127.0.0.1:0"], cwd=work, env=env) as runtime:
                pids = (runtime.process.pid, host.process.pid)
                cpu_before = [cpu_s(pid) for pid in pids]
                sequential, bursts = asyncio.run(
                    measure(runtime.address, args.runs, args.concurrent, args.bursts)
                )
                cpu = [cpu_s(pid) - before for pid, before in zip(pids, cpu_before, strict=True)]
                rss = peak_rss_mb(runtime.process.pid)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    ordered = sorted(sequential)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    per_step = statistics.mean(sequential) / STEPS_PER_RUN
    rates = sorted(args.concurrent * STEPS_PER_RUN / seconds for seconds in bursts)
    rate = statistics.median(rates)
    print(f"\n== {name}{', payloads encrypted at rest' if args.encrypt else ''}")
    print(f"floor: bare INSERT+COMMIT            {floor_s * 1000:8.3f} ms")
    print(
        f"sequential {args.runs} runs x {STEPS_PER_RUN} steps: p50 {p50 * 1000:8.2f} ms/run   "
        f"p99 {p99 * 1000:8.2f} ms/run   {per_step * 1000:6.3f} ms/step "
        f"({per_step / floor_s:4.1f}x floor)"
    )
    spread = f"median of {len(rates)} bursts, {rates[0]:.0f}-{rates[-1]:.0f}" if len(rates) > 1 else ""
    spread = spread or f"{bursts[0]:.2f} s"
    print(f"concurrent {args.concurrent} runs:            {rate:8.0f} steps/s  ({spread})")
    print(f"runtime peak RSS:                  {rss:8.1f} MB")
    steps = (WARM_UP_RUNS + args.runs + args.bursts * args.concurrent) * STEPS_PER_RUN
    cpu_ms = [seconds * 1000 / steps for seconds in cpu]
    print(f"CPU per step: runtime {cpu_ms[0]:.3f} ms, tool host {cpu_ms[1]:.3f} ms (all passes)")
    return per_step, sum(cpu_ms)


def bench_with_tracing(
    name: str, db_urls: tuple[str, str], floor_s: float, work: Path, args: argparse.Namespace
) -> None:
    """The backend untraced, then (with ``--tracing``) traced; the second URL is for the traced pass."""
    off, off_cpu = bench_backend(name, db_urls[0], floor_s, work, args)
    if not args.tracing:
        return
    # The receiver (a collector's stand-in) runs in its own process, not under the client's GIL.
    sink = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("_otlp_sink.py"))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert sink.stdin is not None and sink.stdout is not None
    try:
        otel = {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_ENDPOINT": sink.stdout.readline().strip(),
            "OTEL_TRACES_SAMPLER": "always_on",
        }
        traced = f"{name}, tracing on (100% sampled, OTLP/gRPC to a local receiver process)"
        on, on_cpu = bench_backend(traced, db_urls[1], floor_s, work, args, otel=otel)
    finally:
        sink.stdin.close()
        spans = int(sink.stdout.readline() or 0)
        sink.wait(timeout=30)
    print(
        f"tracing overhead per step: {off * 1000:.3f} ms off, {on * 1000:.3f} ms on "
        f"({(on / off - 1) * 100:+.1f}%; target <= +10%), {spans} spans received"
    )
    print(
        f"tracing overhead in CPU per step (runtime + tool host): {off_cpu:.3f} ms off, "
        f"{on_cpu:.3f} ms on ({(on_cpu / off_cpu - 1) * 100:+.1f}%)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--concurrent", type=int, default=100)
    parser.add_argument(
        "--bursts", type=int, default=5, help="concurrent bursts; the median rate is printed (noise is real)"
    )
    parser.add_argument("--floor-commits", type=int, default=2000)
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--skip-sqlite", action="store_true")
    parser.add_argument("--encrypt", action="store_true", help="encrypt payloads at rest (AES-256-GCM)")
    parser.add_argument(
        "--tracing", action="store_true", help="also run traced (100%% sampling, OTLP) and print the overhead"
    )
    args = parser.parse_args()
    print(
        f"agentrt step-loop benchmark: K={K} no-op tool calls per run ({STEPS_PER_RUN} steps), "
        f"tool host and runtime as real processes, {os.cpu_count()} cores"
    )
    with tempfile.TemporaryDirectory(prefix="agentrt-bench-") as tmp:
        work = Path(tmp)
        if not args.skip_sqlite:
            floor = floor_sqlite(work / "floor.sqlite", args.floor_commits)
            urls = (f"sqlite:///{work / 'bench.sqlite'}", f"sqlite:///{work / 'bench-traced.sqlite'}")
            bench_with_tracing("sqlite (WAL, synchronous=FULL)", urls, floor, work, args)
        if args.skip_postgres:
            return
        # Two databases: the traced pass starts as empty as the untraced one did.
        names = [f"agentrt_bench_{uuid.uuid4().hex[:8]}" for _ in range(2)]
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            for name in names:
                conn.execute(f'CREATE DATABASE "{name}"')
        base = PG_ADMIN.rsplit("/", 1)[0]
        url, traced_url = (f"{base}/{name}" for name in names)
        try:
            floor = floor_postgres(url, args.floor_commits)
            bench_with_tracing("postgresql (local)", (url, traced_url), floor, work, args)
        finally:
            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                for name in names:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
