"""Ledger benchmark: the event-loop time one tool call's ledger work costs, SQLite against PostgreSQL.

The host calls its ledger synchronously from its event loop (``_ledger_pg``'s module doc says
why), so what a call's ``begin`` plus ``finish`` costs is time the loop serves nothing else. This
measures it on both backends, each call with a fresh key under a remembered fencing token (the
usual call: one statement each), and prints mean, p50 and p99 in microseconds per call, plus
``GetOperation``'s read (``get``) on its own.

Run: ``python bench/ledger_backends.py [--calls 2000] [--pg postgresql://postgres@127.0.0.1/postgres]``.
The PostgreSQL ledger goes into a throwaway schema, dropped at the end. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentrt.toolhost._ledger import Ledger  # noqa: E402
from agentrt.toolhost._ledger_backend import LedgerBackend  # noqa: E402
from agentrt.toolhost._ledger_pg import PgLedger  # noqa: E402
from agentrt.toolhost._ledger_pg_config import PgLedgerOptions  # noqa: E402
from agentrt.toolhost._outcome import Outcome  # noqa: E402


def _timed(calls: int, one: Callable[[int], None]) -> list[float]:
    samples = []
    for index in range(calls):
        started = time.perf_counter()
        one(index)
        samples.append((time.perf_counter() - started) * 1e6)
    return samples


def _measure(name: str, ledger: LedgerBackend, calls: int) -> None:
    ledger.check_fence("run-1", 1, tenant="acme")

    def call(index: int) -> None:
        key = f"k{index}"
        ledger.begin(
            tenant="acme",
            idempotency_key=key,
            tool="refund.issue",
            input_hash="h",
            run_id="run-1",
            call_id=key,
            rerun_after_crash=False,
            fencing_token=1,
        )
        ledger.finish(key, Outcome.success('{"ok": true}'), tenant="acme")

    _timed(min(200, calls), lambda i: call(calls + i))  # warm-up
    for label, samples in (
        ("begin+finish", _timed(calls, call)),
        ("get", _timed(calls, lambda i: ledger.get(f"k{i}", tenant="acme") and None)),
    ):
        ordered = sorted(samples)
        print(
            f"{name:<10} {label:<13} mean {statistics.fmean(samples):7.0f} us"
            f"  p50 {ordered[len(ordered) // 2]:7.0f} us  p99 {ordered[int(len(ordered) * 0.99)]:7.0f} us"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Ledger(Path(tmp) / "ledger.sqlite", owner="bench") as sqlite:
        _measure("sqlite", sqlite, args.calls)
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    try:
        with PgLedger(PgLedgerOptions(url=args.pg, schema=schema), owner="bench") as pg:
            _measure("postgres", pg, args.calls)
    finally:
        with psycopg.connect(args.pg, autocommit=True) as db:
            db.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    main()
