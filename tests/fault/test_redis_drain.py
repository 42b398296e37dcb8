"""A drained replica's runs are taken at once through Redis (the released nudge), on real
processes, PostgreSQL and a redis-server of the test's own.

The heirs poll the store every 30 s and leases last 5 s: only the nudge on ``{prefix}released``
can explain a takeover within a second. With Redis down, the drain still hands over, through
the poll loop, and exits 0.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from agentrt.client import Client, event_type
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import RuntimeProcess, ToolHostProcess
from agentrt.testing.redis_server import RedisServer
from tests.fault.conftest import follow_to_end, serve_fake_openai, start_runtime
from tests.fault.test_drain import TTL_S, drain, long_script, replica_env, wait_not_serving, wait_owned_by
from tests.fault.test_replicas import SLOW_WRITE_THEN_DONE, key_of_started, wait_running_on_host

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

SLOW_POLL_S = 30.0  # the heirs' poll loop cannot be what claims a run within the test's bound
FAST_FALLBACK = {
    "command_timeout_s": 0.5,
    "health_interval_s": 0.2,
    "reconnect_base_s": 0.05,
    "reconnect_cap_s": 0.3,
}


@pytest.fixture
def redis_own(tmp_path: Path, redis_server_binary: None) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as server:
        yield server


def env_with_redis(
    base: dict[str, str], worker_id: str, server: RedisServer, prefix: str, **settings: Any
) -> dict[str, str]:
    return replica_env(
        base, worker_id, redis={"url": server.url, "key_prefix": prefix, **FAST_FALLBACK}, **settings
    )


def released_listeners(server: RedisServer, prefix: str) -> int:
    client = redis.Redis(host="127.0.0.1", port=server.port)
    try:
        return int(client.pubsub_numsub(f"{prefix}released")[0][1])
    finally:
        client.close()


def poll(check: Any, what: str, within_s: float = 20.0) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def redis_up(runtime: RuntimeProcess) -> float:
    return runtime.metrics().value("agentrt_redis_up")


def test_runs_handed_over_at_a_drain_are_claimed_through_redis_within_a_second(
    tmp_path: Path, refund_host: ToolHostProcess, pg_url: str, redis_own: RedisServer, redis_prefix: str
) -> None:
    with serve_fake_openai(long_script(12)) as (_, model_url):
        base = {"db_url": pg_url, "tool_host": refund_host.address, "model_url": model_url}
        settings = {"poll_interval_s": SLOW_POLL_S}
        owner = start_runtime(tmp_path, env_with_redis(base, "a", redis_own, redis_prefix, **settings))
        heir = start_runtime(tmp_path, env_with_redis(base, "b", redis_own, redis_prefix, **settings))
        try:
            poll(lambda: released_listeners(redis_own, redis_prefix) == 2, "not both listening")
            with Client(owner.address) as client:
                run_ids = [client.start_run("refund", f"job {i}").run_id for i in range(3)]
            wait_owned_by(heir.address, run_ids, "a")
            takeover_s, exit_s = drain(owner, "a", heir, run_ids)
            logs = {run_id: follow_to_end(heir.address, run_id, timeout=60) for run_id in run_ids}
        finally:
            owner.close()
            heir.close()
    print(
        f"\nSIGTERM of an owner (poll {SLOW_POLL_S:g} s, lease TTL {TTL_S:g} s), released nudge: "
        f"the heir owned its runs {takeover_s * 1000:.0f} ms after; it exited 0 {exit_s:.2f} s after"
    )
    assert takeover_s < 1.0, takeover_s
    for run_id, events in logs.items():
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED, run_id
        stored = [e.seq for e in events if e.seq]
        assert stored == list(range(1, len(stored) + 1)), run_id
        assert "tool.failed" not in [event_type(e) for e in events]


def test_a_lease_released_at_the_drain_deadline_and_a_run_accepted_while_draining_are_claimed_at_once(
    tmp_path: Path, refund_host: ToolHostProcess, pg_url: str, redis_own: RedisServer, redis_prefix: str
) -> None:
    """A 3 s write outlasts the 0.5 s drain: the run is cut and its lease released at the end of
    ``Engine.stop``, named in the drain's last message (flushed before the link closes). A
    StartRun the draining replica accepts is left unowned and named at once."""
    with serve_fake_openai(SLOW_WRITE_THEN_DONE) as (_, model_url):
        base = {"db_url": pg_url, "tool_host": refund_host.address, "model_url": model_url}
        owner = start_runtime(
            tmp_path,
            env_with_redis(base, "a", redis_own, redis_prefix, grace_s=0.5, poll_interval_s=SLOW_POLL_S),
        )
        heir = start_runtime(
            tmp_path, env_with_redis(base, "b", redis_own, redis_prefix, poll_interval_s=SLOW_POLL_S)
        )
        try:
            poll(lambda: released_listeners(redis_own, redis_prefix) == 2, "not both listening")
            with Client(owner.address) as client:
                run_id = client.start_run("refund", "Please refund A100").run_id
            wait_running_on_host(refund_host.data_dir, key_of_started(owner.address, run_id, "slow.write"))
            sigterm_at = time.time()
            owner.process.send_signal(signal.SIGTERM)
            wait_not_serving(owner.address)
            with Client(owner.address) as client:
                late = client.start_run("refund", "Please refund B200")
            accepted_at = time.time()
            assert late.lease_owner == ""  # the draining replica does not drive it
            seen = first_owned_elsewhere(heir.address, [run_id, late.run_id], "a")
            assert owner.wait_exit(timeout=20) == 0, owner.stderr_text()[-2000:]
        finally:
            owner.close()
            heir.close()
    cut_s, late_s = seen[run_id] - sigterm_at, seen[late.run_id] - accepted_at
    print(
        f"\nwrite cut at a 0.5 s drain: the heir owned the run {cut_s * 1000:.0f} ms after SIGTERM; "
        f"a run accepted while draining {late_s * 1000:.0f} ms after it was accepted"
    )
    assert cut_s < 0.5 + 1.0, cut_s  # the drain's grace, then within a second
    assert late_s < 1.0, late_s


def first_owned_elsewhere(
    address: str, run_ids: list[str], drained: str, timeout: float = 15.0
) -> dict[str, float]:
    """When (time.time()) each run was first seen owned by a replica other than ``drained``."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    with Client(address) as client:
        while len(seen) < len(run_ids):
            listed = {r.run_id: r for r in client.list_runs(page_size=100).runs}
            now = time.time()
            for run_id in run_ids:
                if run_id not in seen and listed[run_id].lease_owner not in ("", drained):
                    seen[run_id] = now
            assert time.monotonic() < deadline, f"not taken from {drained}: {set(run_ids) - seen.keys()}"
            time.sleep(0.01)
    return seen


def test_with_redis_down_a_drain_hands_over_through_the_poll_loop_and_exits_0(
    tmp_path: Path, refund_host: ToolHostProcess, pg_url: str, redis_own: RedisServer, redis_prefix: str
) -> None:
    with serve_fake_openai(long_script(12)) as (_, model_url):
        base = {"db_url": pg_url, "tool_host": refund_host.address, "model_url": model_url}
        owner = start_runtime(tmp_path, env_with_redis(base, "a", redis_own, redis_prefix))
        heir = start_runtime(tmp_path, env_with_redis(base, "b", redis_own, redis_prefix))
        try:
            with Client(owner.address) as client:
                run_ids = [client.start_run("refund", f"job {i}").run_id for i in range(3)]
            wait_owned_by(heir.address, run_ids, "a")
            redis_own.kill()
            for replica in (owner, heir):
                poll(lambda r=replica: redis_up(r) == 0, "the gauge never said down")
            takeover_s, _ = drain(owner, "a", heir, run_ids)  # exit status 0 asserted there
            logs = {run_id: follow_to_end(heir.address, run_id, timeout=60) for run_id in run_ids}
            stderr = owner.stderr_text()
        finally:
            owner.close()
            heir.close()
    print(f"\nSIGTERM with Redis down (poll 0.1 s): the heir owned the runs {takeover_s * 1000:.0f} ms after")
    assert takeover_s < TTL_S, takeover_s  # the poll loop, not the lease's expiry
    assert "Traceback" not in stderr, stderr[-3000:]
    assert all(events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED for events in logs.values())
