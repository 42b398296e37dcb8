"""Cross-replica cancel latency, with and without the Redis fan-out (R10.1).

Two runtime replicas on one fresh PostgreSQL database, a tool host with the fault tools, a fake
OpenAI model that asks for a 20 s ``sleep.wait``, and (with Redis) a redis-server of its own on a
free port. Each run is started on one replica; once its tool call is in flight, CancelRun goes
to the other replica, and the time from that call to the owner's ``run.cancelled`` event is one
sample. Without Redis the owner notices in its lease renewal (every ``lease_ttl_s / 3``); with
it, a wake on its channel. Prints the median and the range of each; asserts nothing.

Run: ``python bench/redis_cancel.py`` (``--runs 15``, ``--ttl 5``). Needs PostgreSQL
(``AGENTRT_BENCH_PG``) and ``redis-server`` on PATH.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from agentrt.client import Client, event_type  # noqa: E402
from agentrt.testing import spawn_tool_host  # noqa: E402
from agentrt.testing.redis_server import RedisServer  # noqa: E402
from tests.fault.conftest import runtime_env, serve_fake_openai, start_runtime  # noqa: E402

PG_ADMIN = os.environ.get("AGENTRT_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
LONG_NAP = {1: {"tool": "sleep.wait", "arguments": {"seconds": 20.0}}, 2: {"text": "woke"}}


def samples(work: Path, *, db_url: str, redis_url: str, runs: int, ttl: float) -> list[float]:
    with (
        spawn_tool_host(
            work / "toolhost", plugins=["agentrt.plugins.demo_tools", "agentrt.plugins.fault_tools"]
        ) as host,
        serve_fake_openai(LONG_NAP) as (_, model_url),
    ):
        extra = (
            {"redis": {"url": redis_url, "key_prefix": f"bench-{uuid.uuid4().hex[:8]}:"}} if redis_url else {}
        )
        env = runtime_env(
            db_url=db_url, tool_host=host.address, model_url=model_url, tools=("sleep.wait",), **extra
        )
        env["AGENTRT_LEASE_TTL_S"] = str(ttl)
        owner, other = start_runtime(work, env), start_runtime(work, env)
        taken: list[float] = []
        try:
            for n in range(runs):
                with Client(owner.address) as client:
                    run_id = client.start_run("refund", f"nap {n}").run_id
                    for event in client.stream_events(run_id, follow=True, timeout=60):
                        if event_type(event) == "tool.started":
                            break
                with Client(other.address) as client:
                    asked = time.time()
                    client.cancel_run(run_id, reason="bench")
                    for event in client.stream_events(run_id, follow=True, timeout=60):
                        if event_type(event) == "run.cancelled":
                            taken.append(event.time.ToMilliseconds() / 1000 - asked)
        finally:
            owner.close()
            other.close()
        return taken


def report(label: str, taken: list[float]) -> None:
    ms = sorted(t * 1000 for t in taken)
    median = statistics.median(ms)
    print(f"{label:>14}: median {median:7.1f} ms  (min {ms[0]:.1f}, max {ms[-1]:.1f}, n={len(ms)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--ttl", type=float, default=5.0, help="lease_ttl_s of both replicas")
    args = parser.parse_args()
    print(f"cross-replica CancelRun -> run.cancelled, 2 replicas on PostgreSQL, lease_ttl_s={args.ttl}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for label, with_redis in (("store polling", False), ("redis", True)):
            database = f"agentrt_bench_cancel_{uuid.uuid4().hex[:8]}"
            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{database}"')
            work = root / label.replace(" ", "_")
            work.mkdir()
            try:
                db_url = f"{PG_ADMIN.rsplit('/', 1)[0]}/{database}"
                if with_redis:
                    with RedisServer(work / "redis") as server:
                        taken = samples(
                            work, db_url=db_url, redis_url=server.url, runs=args.runs, ttl=args.ttl
                        )
                else:
                    taken = samples(work, db_url=db_url, redis_url="", runs=args.runs, ttl=args.ttl)
                report(label, taken)
            finally:
                with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


if __name__ == "__main__":
    main()
