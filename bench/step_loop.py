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
``--tracing`` also runs each backend with tracing on in a second runtime and tool host (100%
sampling, OTLP/gRPC to agentrt.testing's receiver in a process of its own, set by OTEL_*
variables alone, on a database of its own), side by side: runs alternate between the two, so
both meet the same moments of a noisy machine. It prints the per-step time and CPU with tracing
off against on (issue 17 targets <= +10%). ``--against CHECKOUT`` runs that checkout's runtime and
tool host (its .venv) side by side with this one's, untraced: a before/after on the same moments.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
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


@dataclasses.dataclass
class Figures:
    """What one configuration measured: per-run seconds, burst seconds, CPU seconds, peak RSS."""

    sequential: list[float] = dataclasses.field(default_factory=list)
    bursts: list[float] = dataclasses.field(default_factory=list)
    cpu: tuple[float, float] = (0.0, 0.0)  # runtime, tool host
    rss_mb: float = float("nan")


@contextlib.contextmanager
def serving(
    db_url: str,
    work: Path,
    args: argparse.Namespace,
    *,
    otel: dict[str, str] | None = None,
    python: str = "",
) -> Iterator[tuple[str, tuple[int, int]]]:
    """A tool host and a runtime on ``db_url`` (run by ``python``, default this interpreter):
    (the runtime's address, (runtime pid, host pid))."""
    key_file = None
    if args.encrypt:
        key_file = work / f"keys-{uuid.uuid4().hex[:8]}.json"
        write_key_file(key_file)
    # The tool host inherits this process's environment: OTEL_* reach it (and the runtime) so.
    saved = {key: os.environ.get(key) for key in otel or {}}
    os.environ.update(otel or {})
    try:
        with spawn_tool_host(
            work / f"host-{uuid.uuid4().hex[:8]}", plugins=["agentrt.plugins.demo_tools"], python=python
        ) as host:
            env = runtime_env(db_url, host.address, key_file=key_file)
            with spawn_runtime(["--listen", "127.0.0.1:0"], cwd=work, env=env, python=python) as runtime:
                for key, value in saved.items():  # what is spawned next starts as it would have
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value
                saved = {}
                yield runtime.address, (runtime.process.pid, host.process.pid)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


async def measure_side_by_side(
    addresses: list[str], runs: int, concurrent: int, bursts: int
) -> list[Figures]:
    """Interleaved: one run on each runtime in turn (the order flips every round), then bursts in
    turn, so every configuration meets the same moments of a noisy machine."""
    figures = [Figures() for _ in addresses]
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(AsyncClient(address, timeout=60)) for address in addresses]
        for client in clients:
            for _ in range(WARM_UP_RUNS):
                await one_run(client)
        order = list(range(len(clients)))
        for _ in range(runs):
            for i in order:
                figures[i].sequential.append(await one_run(clients[i]))
            order.reverse()
        for _ in range(bursts):
            for i in order:
                begun = time.perf_counter()
                await asyncio.gather(*(one_run(clients[i]) for _ in range(concurrent)))
                figures[i].bursts.append(time.perf_counter() - begun)
            order.reverse()
    return figures


def report(name: str, figures: Figures, floor_s: float, args: argparse.Namespace) -> tuple[float, float]:
    """Print one configuration's figures; returns its mean seconds per step (sequential runs) and
    the runtime's and tool host's CPU milliseconds per step."""
    ordered = sorted(figures.sequential)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    per_step = statistics.mean(figures.sequential) / STEPS_PER_RUN
    rates = sorted(args.concurrent * STEPS_PER_RUN / seconds for seconds in figures.bursts)
    rate = statistics.median(rates)
    print(f"\n== {name}{', payloads encrypted at rest' if args.encrypt else ''}")
    print(f"floor: bare INSERT+COMMIT            {floor_s * 1000:8.3f} ms")
    print(
        f"sequential {args.runs} runs x {STEPS_PER_RUN} steps: p50 {p50 * 1000:8.2f} ms/run   "
        f"p99 {p99 * 1000:8.2f} ms/run   {per_step * 1000:6.3f} ms/step "
        f"({per_step / floor_s:4.1f}x floor)"
    )
    spread = f"median of {len(rates)} bursts, {rates[0]:.0f}-{rates[-1]:.0f}" if len(rates) > 1 else ""
    spread = spread or f"{figures.bursts[0]:.2f} s"
    print(f"concurrent {args.concurrent} runs:            {rate:8.0f} steps/s  ({spread})")
    print(f"runtime peak RSS:                  {figures.rss_mb:8.1f} MB")
    steps = (WARM_UP_RUNS + args.runs + args.bursts * args.concurrent) * STEPS_PER_RUN
    cpu_ms = [seconds * 1000 / steps for seconds in figures.cpu]
    print(f"CPU per step: runtime {cpu_ms[0]:.3f} ms, tool host {cpu_ms[1]:.3f} ms (all passes)")
    return per_step, sum(cpu_ms)


def bench_backend(
    name: str, db_urls: tuple[str, str], floor_s: float, work: Path, args: argparse.Namespace
) -> None:
    """The backend untraced and, with ``--tracing``, traced side by side (the second URL, a
    database of its own), then the overhead."""
    sink = None
    try:
        with contextlib.ExitStack() as stack:
            stacks = [stack.enter_context(serving(db_urls[0], work, args))]
            if args.against:
                python = str(Path(args.against).resolve() / ".venv" / "bin" / "python")
                stacks.append(stack.enter_context(serving(db_urls[1], work, args, python=python)))
            elif args.tracing:
                # The receiver (a collector's stand-in) runs in its own process, not under the
                # client's GIL.
                sink = subprocess.Popen(
                    [sys.executable, str(Path(__file__).with_name("_otlp_sink.py"))],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                assert sink.stdout is not None
                endpoints = {"grpc": sink.stdout.readline().strip()}
                endpoints["http/protobuf"] = sink.stdout.readline().strip()
                otel = {
                    "OTEL_TRACES_EXPORTER": "otlp",
                    "OTEL_EXPORTER_OTLP_PROTOCOL": args.otlp_protocol,
                    "OTEL_EXPORTER_OTLP_ENDPOINT": endpoints[args.otlp_protocol],
                    "OTEL_TRACES_SAMPLER": args.sampler,
                    "OTEL_TRACES_SAMPLER_ARG": str(args.sampler_arg),
                }
                stacks.append(stack.enter_context(serving(db_urls[1], work, args, otel=otel)))
            pids = [pid for _, pair in stacks for pid in pair]
            before = [cpu_s(pid) for pid in pids]
            figures = asyncio.run(
                measure_side_by_side(
                    [address for address, _ in stacks], args.runs, args.concurrent, args.bursts
                )
            )
            used = [cpu_s(pid) - b for pid, b in zip(pids, before, strict=True)]
            for i, (_, (runtime_pid, _)) in enumerate(stacks):
                figures[i].cpu = (used[2 * i], used[2 * i + 1])
                figures[i].rss_mb = peak_rss_mb(runtime_pid)
    finally:
        spans = 0
        if sink is not None:
            assert sink.stdin is not None and sink.stdout is not None
            sink.stdin.close()
            spans = int(sink.stdout.readline() or 0)
            sink.wait(timeout=30)
    off, off_cpu = report(name, figures[0], floor_s, args)
    if args.against:
        before, before_cpu = report(f"{name}, {args.against}", figures[1], floor_s, args)
        print(
            f"this checkout against {args.against} (runs interleaved): {off * 1000:.3f} ms/step against "
            f"{before * 1000:.3f} ({(off / before - 1) * 100:+.1f}%), CPU {off_cpu:.3f} ms/step against "
            f"{before_cpu:.3f} ({(off_cpu / before_cpu - 1) * 100:+.1f}%)"
        )
        return
    if not args.tracing:
        return
    sampled = "100% sampled" if args.sampler == "always_on" else f"{args.sampler} {args.sampler_arg:g}"
    traced = f"{name}, tracing on ({sampled}, OTLP {args.otlp_protocol} to a local receiver process)"
    on, on_cpu = report(traced, figures[1], floor_s, args)
    print(
        f"tracing overhead per step (runs interleaved with the untraced ones): {off * 1000:.3f} ms off, "
        f"{on * 1000:.3f} ms on ({(on / off - 1) * 100:+.1f}%; target <= +10%), {spans} spans received"
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
    parser.add_argument(
        "--against",
        metavar="CHECKOUT",
        help="run another checkout's runtime and tool host (its .venv) side by side, untraced",
    )
    parser.add_argument("--otlp-protocol", choices=["grpc", "http/protobuf"], default="grpc")
    parser.add_argument("--sampler", default="always_on", help="OTEL_TRACES_SAMPLER of the traced pass")
    parser.add_argument("--sampler-arg", type=float, default=1.0, help="OTEL_TRACES_SAMPLER_ARG")
    args = parser.parse_args()
    if args.against and args.tracing:
        parser.error("--against compares two checkouts untraced: leave out --tracing")
    if args.against and not (Path(args.against) / ".venv" / "bin" / "python").exists():
        parser.error(f"--against {args.against}: no .venv/bin/python there (make .venv/.installed in it)")
    print(
        f"agentrt step-loop benchmark: K={K} no-op tool calls per run ({STEPS_PER_RUN} steps), "
        f"tool host and runtime as real processes, {os.cpu_count()} cores"
    )
    with tempfile.TemporaryDirectory(prefix="agentrt-bench-") as tmp:
        work = Path(tmp)
        if not args.skip_sqlite:
            floor = floor_sqlite(work / "floor.sqlite", args.floor_commits)
            urls = (f"sqlite:///{work / 'bench.sqlite'}", f"sqlite:///{work / 'bench-2.sqlite'}")
            bench_backend("sqlite (WAL, synchronous=FULL)", urls, floor, work, args)
        if args.skip_postgres:
            return
        # Two databases: the second stack (traced, or --against) starts as empty as the first.
        names = [f"agentrt_bench_{uuid.uuid4().hex[:8]}" for _ in range(2)]
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            for name in names:
                conn.execute(f'CREATE DATABASE "{name}"')
        base = PG_ADMIN.rsplit("/", 1)[0]
        url, second_url = (f"{base}/{name}" for name in names)
        try:
            floor = floor_postgres(url, args.floor_commits)
            bench_backend("postgresql (local)", (url, second_url), floor, work, args)
        finally:
            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                for name in names:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
