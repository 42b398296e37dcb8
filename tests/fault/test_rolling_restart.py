"""Rolling restarts under load (issue 18): every replica, then every tool host of the pool.

The scale-out test's cluster (tests/fault/test_scale_out.py): PostgreSQL migrated by the deploy
Job's command, a redis-server of the test's own, 3 runtime replicas on the deploy config's
values and a 2-host pool on a PostgreSQL ledger. Each run reads (``pool.peek``), writes
(``pool.charge``, whose own store counts raw executions) and reads again, while:

- each replica in turn is replaced as a Deployment's rolling update does it: the new pod first
  (surge), then SIGTERM to the old one, which drains and exits 0;
- each tool host in turn gets SIGTERM, drains, exits 0 and is started again on its address; the
  next one is drained only once the restarted one serves reads again (a readiness gate).

Shown: 0 failed runs, 0 failed read calls (no ``tool.failed`` for a read, in any attempt), and
each write executed exactly once. Figures are printed (``pytest -s``).
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentrt.client import Client
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import FakeModelServer, FakeResponse, RecordedRequest
from agentrt.testing.redis_server import RedisServer
from tests.fault._pool_plugin import charge_counts, peeks_by
from tests.fault.conftest import FakeOpenAI
from tests.fault.test_scale_out import (
    REPLICAS,
    Feeder,
    Pool,
    Replicas,
    deployed,
    ended_count,
    migrate_as_the_deploy_job_does,
    poll,
    replica_env,
)

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

BATCH = 30  # runs let go before each of the five restarts, and after each host's restart
RUNS = 7 * BATCH
SCRIPT: dict[int, dict[str, Any]] = {
    1: {"tool": "pool.peek", "arguments": {"order_id": "A1"}},
    2: {"tool": "pool.charge", "arguments": {"order_id": "A1", "amount": 10.0}},
    3: {"tool": "pool.peek", "arguments": {"order_id": "A1"}},
    4: {"text": "Charged and checked."},
}
READ, WRITE = "pool.peek", "pool.charge"


def mixed_agent(model_url: str) -> dict[str, Any]:
    return {
        "mixed": {
            "instructions": "Check, charge, check.",
            "tools": [READ, WRITE],
            "model": {
                "provider": "openai",
                "name": "gpt-mixed",
                "options": {"base_url": model_url, "api_key_env": "FAKE_KEY"},
            },
            "budgets": {"max_model_steps": 8, "timeout_s": 300},
        }
    }


def let_a_batch_go(feeder: Feeder, pool: Pool, allowed: int) -> None:
    """Let ``BATCH`` more runs start, and return once half of them wrote: the restart that follows
    lands with runs in flight."""
    writes_before = sum(charge_counts(pool.store).values())
    feeder.allow(allowed)
    poll(
        lambda: sum(charge_counts(pool.store).values()) >= writes_before + BATCH // 2,
        "the batch's writes never happened",
        within_s=120,
    )


@pytest.mark.timeout(600)
def test_rolling_restarts_of_every_replica_and_every_pool_host_fail_no_run_read_or_write(
    tmp_path: Path, pg_url: str, pg_database: str, redis_server_binary: None
) -> None:
    began = time.monotonic()
    settings, deploy_values = deployed()
    migrate_as_the_deploy_job_does(pg_url)
    model = FakeOpenAI(SCRIPT)
    pool = Pool(tmp_path, pg_database)
    redis_server = RedisServer(tmp_path / "redis")

    def respond(request: RecordedRequest) -> FakeResponse:
        return FakeResponse.json_body(model.answer(request.json()))

    replica_figures: list[tuple[str, float]] = []
    host_figures: list[tuple[int, float, float, float]] = []
    with FakeModelServer(default=respond) as model_server, redis_server:
        model_url = f"{model_server.url}/v1"
        pool.start()
        redis_table = {**settings.redis.model_dump(exclude_defaults=True), "url": redis_server.url}
        replicas = Replicas(
            tmp_path,
            replica_env(
                pg_url,
                pool=pool,
                model_url=model_url,
                redis_table=redis_table,
                deploy=deploy_values,
                agents_table=mixed_agent(model_url),
            ),
        )
        feeder = Feeder(replicas, agent="mixed", runs=RUNS)
        try:
            for replica in [replicas.spawn(slot) for slot in range(REPLICAS)]:
                replicas.join(replica)
            feeder.start()
            allowed = 0
            for slot in range(REPLICAS):
                allowed += BATCH
                let_a_batch_go(feeder, pool, allowed)
                victim = next(r for r in replicas.live() if r.slot == slot)
                heir = replicas.spawn(slot)  # the surge: the new pod is ready before the old drains
                replicas.join(heir)
                replicas.leave(victim)
                victim.process.process.send_signal(signal.SIGTERM)
                sigterm_at = time.monotonic()
                code = victim.process.wait_exit(settings.grace_s + settings.rpc_grace_s + 15)
                assert code == 0, victim.process.stderr_text()[-3000:]
                replica_figures.append((victim.name, time.monotonic() - sigterm_at))
            for index in range(2):
                allowed += BATCH
                let_a_batch_go(feeder, pool, allowed)
                exited_s, back_s = pool.drain_and_restart(index)
                restarted_at = time.time()
                allowed += BATCH
                feeder.allow(allowed)
                # Readiness: the next member is drained only once this one serves reads again.
                serving_s = poll(
                    lambda i=index, t=restarted_at: peeks_by(pool.store, f"m{i}", since=t) > 0,
                    f"tool host {index} never served again",
                    within_s=60,
                )
                host_figures.append((index, exited_s, back_s, serving_s))
            feeder.allow(RUNS)
            run_ids = feeder.result()
            reader = replicas.live()[0]
            with Client(reader.address, timeout=10) as client:
                poll(lambda: ended_count(client, run_ids) == len(run_ids), "runs still going", 240, 0.2)
                logs = {run_id: list(client.stream_events(run_id, timeout=30)) for run_id in run_ids}
                resends = sum(
                    r.process.metrics().value("agentrt_tool_drain_resend_count_total")
                    for r in replicas.live()
                )
        finally:
            feeder.halt()
            replicas.close()
            pool.close()

    print(
        f"\nrolling restart: {len(run_ids)} runs in {time.monotonic() - began:.0f} s, "
        f"starts sent again {feeder.retried}"
    )
    for name, exit_s in replica_figures:
        print(f"replica {name}: SIGTERM to exit 0 in {exit_s:.2f} s (its heir was ready first)")
    for index, exited_s, back_s, serving_s in host_figures:
        print(
            f"tool host {index}: SIGTERM to exit 0 in {exited_s:.2f} s, listening again at {back_s:.2f} s, "
            f"serving reads again {serving_s:.2f} s after that"
        )
    failed: Counter[str] = Counter()
    attempts: Counter[str] = Counter()
    phases: Counter[str] = Counter()
    keys: set[str] = set()
    why: list[str] = []
    for run_id, events in logs.items():
        stored = [e.seq for e in events if e.seq]
        assert stored == list(range(1, len(stored) + 1)), run_id  # no gap, no duplicate
        phases[run_pb2.RunPhase.Name(events[-1].run_ended.phase)] += 1
        for event in events:
            if event.HasField("tool_started"):
                attempts[event.tool_started.tool] += 1
                if event.tool_started.tool == WRITE:
                    keys.add(event.tool_started.idempotency_key)
            elif event.HasField("tool_failed"):
                failed[event.tool_failed.tool] += 1
                why.append(f"{event.tool_failed.tool}: {event.tool_failed.error.message}")
    counts = charge_counts(pool.store)
    print(f"runs by phase {dict(phases)}; tool attempts {dict(attempts)}; failed attempts {dict(failed)}")
    print(f"drain refusals sent again at once to a serving member: {resends:g}")
    print(f"writes: {len(keys)} keys, {sum(counts.values())} raw executions in the plugin's store")

    assert len(run_ids) == len(set(run_ids)) == RUNS
    assert phases == {"RUN_PHASE_COMPLETED": RUNS}  # 0 failed runs
    assert failed[READ] == 0 and attempts[READ] == 2 * RUNS, why  # 0 failed read calls, none sent twice
    assert {k: n for k, n in counts.items() if n != 1} == {}  # 0 duplicate writes
    assert counts.keys() == keys and len(keys) == RUNS  # each run's write, once
