"""Step-loop benchmark and performance gate: what one agent step costs, against the floor of one
bare commit and issue 19's goals.

A scripted agent makes K=5 calls of a no-op tool served by a real tool host process (11 steps per
run: 6 model steps, 5 tool steps), and the client follows every event over RunAgent. For SQLite
(WAL, synchronous=FULL) and PostgreSQL it prints:

- per-run p50/p99 and per-step time over 200 sequential runs,
- per-step time of K=50 runs (101 steps), interleaved with those (``--long-runs``),
- steps/s with 100 runs in flight at once (the median of 5 such bursts, and their range),
- the runtime process's peak RSS,
- the floor: one bare INSERT + COMMIT per step on the same database,
- the same workload secured as in production, side by side (runs alternate between the two, so
  both meet the same moments of a noisy machine): the API over TLS with a bearer token, mTLS and
  a call grant on every tool call, tracing sampled at 10% (``traceidratio 0.1``, OTLP to a
  receiver in a process of its own); ``--skip-secure`` leaves it out,

and ends with a summary table: each figure, its goal (issue 19), met or MISSED.

Run: ``make bench`` (or ``python bench/step_loop.py --runs 200 --concurrent 100 --bursts 5``).
``make bench-quick`` (``--quick``) is the gate for every change, under a minute: SQLite only, fewer
runs, the same table and the ratio to the floor measured in the same run; with ``--against
CHECKOUT`` it compares against another checkout on the same moments.
``--encrypt`` turns on payload encryption at rest (a fresh key file, ``[encryption] key_file``).
``--tracing`` also runs each backend with tracing on in another runtime and tool host (100%
sampling, OTLP/gRPC to agentrt.testing's receiver in a process of its own, set by OTEL_*
variables alone, on a database of its own), side by side, and prints the per-step time and CPU
with tracing off against on (issue 17 targets <= +10%). ``--against CHECKOUT`` runs that
checkout's runtime and tool host (its .venv) side by side with this one's, untraced: a
before/after on the same moments. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
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
sys.path.insert(0, str(ROOT / "bench"))

import _goals as goals  # noqa: E402
from _goals import Summary  # noqa: E402
from _workload import LONG_K, Stack, serving, steps_per_run  # noqa: E402
from _workload import PG_ADMIN as PG_ADMIN  # noqa: E402
from _workload import STEPS_PER_RUN as STEPS_PER_RUN  # noqa: E402
from _workload import WARM_UP_RUNS as WARM_UP_RUNS  # noqa: E402
from _workload import K as K  # noqa: E402
from _workload import cpu_s as cpu_s  # noqa: E402
from _workload import one_run as one_run  # noqa: E402
from _workload import peak_rss_mb as peak_rss_mb  # noqa: E402
from _workload import runtime_env as runtime_env  # noqa: E402

# The default run and the quick one (--quick): explicit options override either.
FULL = {"runs": 200, "concurrent": 100, "bursts": 5, "floor_commits": 2000, "long_runs": 10}
QUICK = {"runs": 50, "concurrent": 100, "bursts": 2, "floor_commits": 500, "long_runs": 4}
SECURE_SAMPLER, SECURE_SAMPLER_ARG = "traceidratio", 0.1


FLOOR_CHUNKS = 5


def floor_sqlite(path: Path, n: int) -> float:
    """Seconds per bare INSERT + COMMIT: the median of FLOOR_CHUNKS chunks' means, so that a
    moment of another job's fsyncs does not move the floor every ratio is taken against."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS floor (id INTEGER PRIMARY KEY, payload TEXT)")
    chunks = []
    for chunk in _chunks(n):
        begun = time.perf_counter()
        for i in range(chunk):
            conn.execute("BEGIN")
            conn.execute("INSERT INTO floor (payload) VALUES (?)", (f"event {i}",))
            conn.execute("COMMIT")
        chunks.append((time.perf_counter() - begun) / chunk)
    conn.close()
    return statistics.median(chunks)


def floor_postgres(url: str, n: int) -> float:
    """As floor_sqlite, on PostgreSQL (autocommit: one INSERT is one transaction)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS floor (id BIGSERIAL PRIMARY KEY, payload TEXT)")
        chunks = []
        for chunk in _chunks(n):
            begun = time.perf_counter()
            for i in range(chunk):
                conn.execute("INSERT INTO floor (payload) VALUES (%s)", (f"event {i}",))
            chunks.append((time.perf_counter() - begun) / chunk)
        return statistics.median(chunks)


def _chunks(n: int) -> list[int]:
    size = max(1, n // FLOOR_CHUNKS)
    return [size] * (n // size) if n >= size else [n]


@dataclasses.dataclass
class Figures:
    """What one configuration measured: per-run seconds (K=5 and K=50), burst seconds, CPU
    seconds, peak RSS, and the steps all of it took (warm-up included, for CPU per step)."""

    sequential: list[float] = dataclasses.field(default_factory=list)
    long: list[float] = dataclasses.field(default_factory=list)
    bursts: list[float] = dataclasses.field(default_factory=list)
    cpu: tuple[float, float] = (0.0, 0.0)  # runtime, tool host
    rss_mb: float = float("nan")
    steps: int = 0


@dataclasses.dataclass(frozen=True)
class Plan:
    """One stack of a backend's side-by-side pass."""

    label: str
    python: str = ""
    secure: bool = False
    otel: bool = False
    sampler: tuple[str, float] = ("always_on", 1.0)


async def measure_side_by_side(
    stacks: list[Stack], runs: int, concurrent: int, bursts: int, long_runs: int
) -> list[Figures]:
    """Interleaved: one run on each runtime in turn (the order flips every round), a K=50 run on
    each every ``runs // long_runs`` rounds, then bursts in turn, so every configuration meets the
    same moments of a noisy machine."""
    figures = [Figures() for _ in stacks]
    short, long = steps_per_run(K), steps_per_run(LONG_K)
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(s.client(timeout=120)) for s in stacks]
        for client, figure in zip(clients, figures, strict=True):
            for _ in range(WARM_UP_RUNS):
                await one_run(client)
            figure.steps += WARM_UP_RUNS * short
            if long_runs:
                await one_run(client, LONG_K)
                figure.steps += long
        order = list(range(len(clients)))
        every = max(1, runs // long_runs) if long_runs else 0
        for round_ in range(runs):
            for i in order:
                figures[i].sequential.append(await one_run(clients[i]))
                figures[i].steps += short
            if every and round_ % every == every - 1 and len(figures[0].long) < long_runs:
                for i in order:
                    figures[i].long.append(await one_run(clients[i], LONG_K))
                    figures[i].steps += long
            order.reverse()
        for _ in range(bursts):
            for i in order:
                begun = time.perf_counter()
                await asyncio.gather(*(one_run(clients[i]) for _ in range(concurrent)))
                figures[i].bursts.append(time.perf_counter() - begun)
                figures[i].steps += concurrent * short
            order.reverse()
    return figures


def report(name: str, figures: Figures, floor_s: float, args: argparse.Namespace) -> Summary:
    """Print one configuration's figures; returns its headline ones."""
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
    long_per_step = float("nan")
    if figures.long:
        long_steps = steps_per_run(LONG_K)
        # Medians, against K=5's: a few K=50 runs, so one that meets a noisy moment must not
        # decide the figure.
        long_per_step = statistics.median(figures.long) / long_steps
        print(
            f"K={LONG_K}, {len(figures.long)} runs x {long_steps} steps: p50 "
            f"{statistics.median(figures.long) * 1000:8.2f} ms/run   {long_per_step * 1000:6.3f} ms/step "
            f"(p50 per step {(long_per_step / (p50 / STEPS_PER_RUN) - 1) * 100:+.1f}% against K={K})"
        )
    spread = f"median of {len(rates)} bursts, {rates[0]:.0f}-{rates[-1]:.0f}" if len(rates) > 1 else ""
    spread = spread or f"{figures.bursts[0]:.2f} s"
    print(f"concurrent {args.concurrent} runs:            {rate:8.0f} steps/s  ({spread})")
    print(f"runtime peak RSS:                  {figures.rss_mb:8.1f} MB")
    cpu_ms = [seconds * 1000 / figures.steps for seconds in figures.cpu]
    print(f"CPU per step: runtime {cpu_ms[0]:.3f} ms, tool host {cpu_ms[1]:.3f} ms (all passes)")
    return Summary(
        per_step=per_step,
        p99_over_median=p99 / p50,
        rate=rate,
        rss_mb=figures.rss_mb,
        cpu_ms=sum(cpu_ms),
        long_per_step=long_per_step,
        p50_per_step=p50 / STEPS_PER_RUN,
    )


@contextlib.contextmanager
def otlp_sink(needed: bool, protocol: str) -> Iterator[tuple[str, list[int]]]:
    """An OTLP receiver in its own process (a collector's stand-in, not under the client's GIL):
    its endpoint, and a list that holds the spans it received once the block ends."""
    if not needed:
        yield "", []
        return
    sink = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("_otlp_sink.py"))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert sink.stdin is not None and sink.stdout is not None
    spans: list[int] = []
    try:
        endpoints = {"grpc": sink.stdout.readline().strip()}
        endpoints["http/protobuf"] = sink.stdout.readline().strip()
        yield endpoints[protocol], spans
    finally:
        sink.stdin.close()
        spans.append(int(sink.stdout.readline() or 0))
        sink.wait(timeout=30)


def plans(name: str, args: argparse.Namespace) -> list[Plan]:
    """The stacks of one backend's pass: this checkout plain first, then what is compared to it."""
    result = [Plan(name)]
    if args.against:
        python = str(Path(args.against).resolve() / ".venv" / "bin" / "python")
        result.append(Plan(f"{name}, {args.against}", python=python))
    if args.tracing:
        sampled = "100% sampled" if args.sampler == "always_on" else f"{args.sampler} {args.sampler_arg:g}"
        traced = f"{name}, tracing on ({sampled}, OTLP {args.otlp_protocol} to a local receiver process)"
        result.append(Plan(traced, otel=True, sampler=(args.sampler, args.sampler_arg)))
    if not args.skip_secure:
        secured = f"{name}, TLS + token, mTLS + grants, tracing {SECURE_SAMPLER} {SECURE_SAMPLER_ARG:g}"
        result.append(Plan(secured, secure=True, otel=True, sampler=(SECURE_SAMPLER, SECURE_SAMPLER_ARG)))
    return result


def bench_backend(
    name: str, db_urls: list[str], floor_s: float, work: Path, args: argparse.Namespace
) -> dict[str, Summary]:
    """The backend's stacks side by side (each on a database of its own), then the comparisons.
    Returns the summaries by role: "plain", "against", "traced", "secured"."""
    stacks_plan = plans(name, args)
    sink = otlp_sink(any(p.otel for p in stacks_plan), args.otlp_protocol)
    with sink as (endpoint, spans), contextlib.ExitStack() as stack:
        stacks = []
        for plan, url in zip(stacks_plan, db_urls, strict=True):
            otel = None
            if plan.otel:
                otel = {
                    "OTEL_TRACES_EXPORTER": "otlp",
                    "OTEL_EXPORTER_OTLP_PROTOCOL": args.otlp_protocol,
                    "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
                    "OTEL_TRACES_SAMPLER": plan.sampler[0],
                    "OTEL_TRACES_SAMPLER_ARG": str(plan.sampler[1]),
                }
            serve = serving(
                url, work, encrypt=args.encrypt, secure=plan.secure, otel=otel, python=plan.python
            )
            stacks.append(stack.enter_context(serve))
        pids = [pid for s in stacks for pid in (s.runtime_pid, s.host_pid)]
        before = [cpu_s(pid) for pid in pids]
        figures = asyncio.run(
            measure_side_by_side(stacks, args.runs, args.concurrent, args.bursts, args.long_runs)
        )
        used = [cpu_s(pid) - b for pid, b in zip(pids, before, strict=True)]
        for i, s in enumerate(stacks):
            figures[i].cpu = (used[2 * i], used[2 * i + 1])
            figures[i].rss_mb = peak_rss_mb(s.runtime_pid)
    summaries = [report(p.label, f, floor_s, args) for p, f in zip(stacks_plan, figures, strict=True)]
    roles = ["plain"]
    roles += ["against"] if args.against else []
    roles += ["traced"] if args.tracing else []
    roles += ["secured"] if not args.skip_secure else []
    by_role = dict(zip(roles, summaries, strict=True))
    off = by_role["plain"]
    if "against" in by_role:
        before_ = by_role["against"]
        print(
            f"this checkout against {args.against} (runs interleaved): {off.per_step * 1000:.3f} ms/step "
            f"against {before_.per_step * 1000:.3f} ({(off.per_step / before_.per_step - 1) * 100:+.1f}%), "
            f"CPU {off.cpu_ms:.3f} ms/step against {before_.cpu_ms:.3f} "
            f"({(off.cpu_ms / before_.cpu_ms - 1) * 100:+.1f}%)"
        )
    received = f"{spans[0]} spans received" if spans else ""
    if "traced" in by_role:
        on = by_role["traced"]
        print(
            f"tracing overhead per step (runs interleaved with the untraced ones): {off.per_step * 1000:.3f} "
            f"ms off, {on.per_step * 1000:.3f} ms on ({(on.per_step / off.per_step - 1) * 100:+.1f}%; "
            f"target <= +10%), {received}"
        )
        print(
            f"tracing overhead in CPU per step (runtime + tool host): {off.cpu_ms:.3f} ms off, "
            f"{on.cpu_ms:.3f} ms on ({(on.cpu_ms / off.cpu_ms - 1) * 100:+.1f}%)"
        )
    if "secured" in by_role:
        on = by_role["secured"]
        print(
            f"secured (TLS, grants, tracing {SECURE_SAMPLER_ARG:.0%}) against plain, runs interleaved: "
            f"{on.per_step * 1000:.3f} ms/step against {off.per_step * 1000:.3f} "
            f"({(on.per_step / off.per_step - 1) * 100:+.1f}%), {on.rate:.0f} steps/s against "
            f"{off.rate:.0f} ({(on.rate / off.rate - 1) * 100:+.1f}%), CPU {on.cpu_ms:.3f} ms/step "
            f"against {off.cpu_ms:.3f} ({(on.cpu_ms / off.cpu_ms - 1) * 100:+.1f}%); {received}"
        )
    return by_role


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"the gate for every change, under a minute: SQLite only, {QUICK['runs']} runs, "
        f"{QUICK['bursts']} bursts (explicit options still apply)",
    )
    parser.add_argument("--runs", type=int, help=f"sequential runs (default {FULL['runs']})")
    parser.add_argument("--concurrent", type=int, help=f"runs per burst (default {FULL['concurrent']})")
    parser.add_argument(
        "--bursts",
        type=int,
        help=f"concurrent bursts; the median rate is printed (noise is real; default {FULL['bursts']})",
    )
    parser.add_argument("--floor-commits", type=int, help=f"default {FULL['floor_commits']}")
    parser.add_argument(
        "--long-runs",
        type=int,
        help=f"K={LONG_K} runs interleaved with the sequential ones "
        f"(default {FULL['long_runs']}, quick {QUICK['long_runs']}; 0: none)",
    )
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--skip-sqlite", action="store_true")
    parser.add_argument(
        "--skip-secure", action="store_true", help="leave out the TLS + grants + tracing 10%% pass"
    )
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
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.long_runs = min(args.long_runs, args.runs)  # spread over the sequential rounds
    for key in ("runs", "concurrent", "bursts", "floor_commits"):
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be at least 1")
    if args.long_runs < 0:
        parser.error("--long-runs must be at least 0")
    args.secure_skipped_by = "--skip-secure"
    if args.quick:
        # Under a minute on 2 cores: SQLite only, and with --against the two plain stacks only.
        args.skip_postgres = True
        args.secure_skipped_by = "--skip-secure" if args.skip_secure else "--quick --against"
        args.skip_secure = args.skip_secure or bool(args.against)
    if args.skip_sqlite and args.skip_postgres:
        parser.error("nothing to measure: --skip-sqlite with --skip-postgres (or --quick)")
    if args.against and args.tracing:
        parser.error("--against compares two checkouts untraced: leave out --tracing")
    if args.against and not (Path(args.against) / ".venv" / "bin" / "python").exists():
        parser.error(f"--against {args.against}: no .venv/bin/python there (make .venv/.installed in it)")
    print(
        f"agentrt step-loop benchmark{' (quick)' if args.quick else ''}: K={K} no-op tool calls per run "
        f"({STEPS_PER_RUN} steps), tool host and runtime as real processes, {os.cpu_count()} cores"
    )
    stacks = len(plans("", args))
    results: dict[str, tuple[float, dict[str, Summary]]] = {}
    with tempfile.TemporaryDirectory(prefix="agentrt-bench-") as tmp:
        work = Path(tmp)
        if not args.skip_sqlite:
            floor = floor_sqlite(work / "floor.sqlite", args.floor_commits)
            urls = [f"sqlite:///{work / f'bench-{i}.sqlite'}" for i in range(stacks)]
            results["sqlite"] = (
                floor,
                bench_backend("sqlite (WAL, synchronous=FULL)", urls, floor, work, args),
            )
        if not args.skip_postgres:
            results["postgresql"] = bench_postgres(work, stacks, args)
    print(f"\n== summary: issue 19's goals ({os.cpu_count()} cores{', quick' if args.quick else ''})")
    rows = goals.summary_rows(results, args)
    print(goals.table(rows, other_names=[args.against] if args.against else []))


def bench_postgres(work: Path, stacks: int, args: argparse.Namespace) -> tuple[float, dict[str, Summary]]:
    # A database per stack: each starts as empty as the first.
    names = [f"agentrt_bench_{uuid.uuid4().hex[:8]}" for _ in range(stacks)]
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        for name in names:
            conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN.rsplit("/", 1)[0]
    urls = [f"{base}/{name}" for name in names]
    try:
        floor = floor_postgres(urls[0], args.floor_commits)
        return floor, bench_backend("postgresql (local)", urls, floor, work, args)
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            for name in names:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
