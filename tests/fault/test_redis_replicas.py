"""Two runtime replicas on one PostgreSQL schema, with a redis-server of the test's own (ACL user).

- a follower on the replica that does not own the run sees every delta and every persisted event;
- a CancelRun on the non-owner reaches the owner far sooner than its lease renewal could;
- Redis killed mid-run: runs complete, followers get every persisted event, the fallback is
  counted, and the fan-out is back once Redis is;
- a wrong password stops the runtime at start with a clear error that does not show it.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from agentrt.client import Client, event_type
from agentrt.plugins.demo_tools import count_refunds
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import (
    Exchange,
    FakeModelServer,
    FakeResponse,
    RecordedRequest,
    RuntimeProcess,
    ToolHostProcess,
)
from agentrt.testing.redis_server import RedisServer
from tests.fault.conftest import REFUND_SCRIPT, runtime_env, serve_fake_openai, start_runtime

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

FIXTURES = Path(__file__).parent.parent / "fixtures" / "models"
USER, PASSWORD = "agentrt-runtime", "redis-pass-Zq81"
LONG_NAP = {1: {"tool": "sleep.wait", "arguments": {"seconds": 20.0}}, 2: {"text": "woke"}}


@pytest.fixture
def redis_acl(tmp_path: Path, redis_server_binary: None, redis_prefix: str) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis", users={USER: PASSWORD}, channel_prefix=redis_prefix) as server:
        yield server


def redis_settings(server: RedisServer, prefix: str, **extra: Any) -> dict[str, Any]:
    return {
        "url": server.url,
        "username": USER,
        "password_env": "TEST_REDIS_PASSWORD_X",
        "key_prefix": prefix,
        **extra,
    }


def env_for(
    server: RedisServer, prefix: str, *, redis_extra: dict[str, Any] | None = None, **base: Any
) -> dict[str, str]:
    env = runtime_env(**base, redis=redis_settings(server, prefix, **(redis_extra or {})))
    env["TEST_REDIS_PASSWORD_X"] = PASSWORD
    return env


def subscribers(server: RedisServer, channel: str) -> int:
    client = redis.Redis(host="127.0.0.1", port=server.port, username=USER, password=PASSWORD)
    try:
        return int(client.pubsub_numsub(channel)[0][1])
    finally:
        client.close()


def slots_taken(server: RedisServer, key: str) -> int:
    client = redis.Redis(host="127.0.0.1", port=server.port, username=USER, password=PASSWORD)
    try:
        return int(client.zcard(key))
    finally:
        client.close()


def poll(check: Any, what: str, within_s: float = 20.0) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


class Follower(threading.Thread):
    """Follows one run on one replica in a thread, keeping every event."""

    def __init__(self, address: str, run_id: str):
        super().__init__(daemon=True)
        self.address, self.run_id = address, run_id
        self.events: list[Any] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with Client(self.address) as client:
                self.events.extend(client.stream_events(self.run_id, follow=True, timeout=60))
        except BaseException as exc:
            self.error = exc

    def result(self) -> list[Any]:
        self.join(60)
        assert not self.is_alive() and self.error is None, self.error
        return self.events


def deltas(events: list[Any]) -> list[str]:
    return [e.model_text_delta.text for e in events if event_type(e) == "model.text.delta"]


def persisted(events: list[Any]) -> list[int]:
    return [e.seq for e in events if e.seq]


def test_a_follower_on_the_non_owner_sees_every_delta_and_event(
    tmp_path: Path, refund_host: ToolHostProcess, pg_url: str, redis_acl: RedisServer, redis_prefix: str
) -> None:
    # The answer streams, held before its first byte until both followers listen.
    answer = Exchange.load(FIXTURES / "openai_stream_text.json").response.with_pause(0)

    def respond(request: RecordedRequest) -> FakeResponse:
        return answer

    with FakeModelServer(default=respond) as model:
        env = env_for(
            redis_acl, redis_prefix, db_url=pg_url, tool_host=refund_host.address, model_url=f"{model.url}/v1"
        )
        owner, other = start_runtime(tmp_path, env), start_runtime(tmp_path, env)
        try:
            with Client(owner.address) as client:
                run_id = client.start_run("refund", "What about A100?").run_id
            assert answer.paused.wait(20)
            listening = redis.Redis(
                host="127.0.0.1", port=redis_acl.port, username=USER, password=PASSWORD
            ).pubsub(ignore_subscribe_messages=True)
            listening.subscribe(f"{redis_prefix}interest")
            followers = [Follower(owner.address, run_id), Follower(other.address, run_id)]
            for follower in followers:
                follower.start()
            # Both replicas listen on the run's channel (each has a local follower of it) and
            # announced it, so the owner, whose earlier publishes nobody heard, publishes again.
            poll(
                lambda: subscribers(redis_acl, f"{redis_prefix}run:{run_id}") == 2,
                "followers never subscribed",
            )
            # And each has replayed what is stored (run.started, step.started): it is live, so a
            # delta published after step.started is in order for it.
            poll(lambda: all(len(f.events) >= 2 for f in followers), "followers never replayed")
            announced: set[str] = set()
            deadline = time.monotonic() + 20
            while len(announced) < 2:
                assert time.monotonic() < deadline, "no announcement"
                message = listening.get_message(timeout=1)
                if message is not None and json.loads(message["data"])["n"] == run_id:
                    announced.add(json.loads(message["data"])["o"])
            listening.close()
            answer.gate.set()
            on_owner, on_other = (f.result() for f in followers)
        finally:
            owner.close()
            other.close()
    assert on_owner[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
    assert deltas(on_owner) and deltas(on_other) == deltas(on_owner)
    assert "".join(deltas(on_other)).startswith("Order A100")
    assert persisted(on_other) == persisted(on_owner) == list(range(1, len(persisted(on_owner)) + 1))


def test_a_cancel_on_the_non_owner_reaches_the_owner_at_once(
    tmp_path: Path, refund_host: ToolHostProcess, pg_url: str, redis_acl: RedisServer, redis_prefix: str
) -> None:
    # A 30 s lease is renewed every 10 s: only the wake through Redis can explain a fast cancel.
    with serve_fake_openai(LONG_NAP) as (_, model_url):
        env = env_for(
            redis_acl,
            redis_prefix,
            redis_extra={"tool_limits": "global"},
            db_url=pg_url,
            tool_host=refund_host.address,
            model_url=model_url,
        )
        env["AGENTRT_LEASE_TTL_S"] = "30"
        # The nap holds the one slot over both replicas, counted in Redis, while it runs.
        env["AGENTRT_TOOL_LIMITS"] = json.dumps({"max_concurrent_calls": {"sleep.wait": 1}})
        owner, other = start_runtime(tmp_path, env), start_runtime(tmp_path, env)
        latencies: list[float] = []
        try:
            for attempt in range(5):
                with Client(owner.address) as client:
                    run_id = client.start_run("refund", f"nap {attempt}").run_id
                    for event in client.stream_events(run_id, follow=True, timeout=30):
                        if event_type(event) == "tool.started":
                            break
                # tool.started is committed before the call takes its slot and goes out.
                key = f"{redis_prefix}slots:sleep.wait"
                poll(lambda k=key: slots_taken(redis_acl, k) == 1, owner.stderr_text()[-2000:], within_s=10)
                with Client(other.address) as client:
                    asked_at = time.time()
                    client.cancel_run(run_id, reason="asked elsewhere")
                    events = [e for e in client.stream_events(run_id, follow=True, timeout=30) if e.seq]
                ended = events[-1]
                assert ended.run_ended.phase == run_pb2.RUN_PHASE_CANCELLED
                assert ended.run_ended.reason == "asked elsewhere"
                cancelled = next(e for e in events if event_type(e) == "run.cancelled")
                latencies.append(cancelled.time.ToMilliseconds() / 1000 - asked_at)
        finally:
            owner.close()
            other.close()
    assert slots_taken(redis_acl, f"{redis_prefix}slots:sleep.wait") == 0  # each given back
    median = statistics.median(latencies)
    print(f"cross-replica cancel, median of {len(latencies)}: {median * 1000:.0f} ms ({latencies})")
    assert max(latencies) < 3.0, latencies  # the renew period is 10 s
    assert median < 1.0, latencies


def test_redis_killed_mid_run_falls_back_to_the_store_and_recovers(
    tmp_path: Path, refund_host: ToolHostProcess, pg_url: str, redis_acl: RedisServer, redis_prefix: str
) -> None:
    nap_then_refund = {
        1: {"tool": "sleep.wait", "arguments": {"seconds": 2.0}},
        2: REFUND_SCRIPT[2],
        3: REFUND_SCRIPT[3],
    }
    fast = {
        "command_timeout_s": 0.5,
        "health_interval_s": 0.2,
        "reconnect_base_s": 0.05,
        "reconnect_cap_s": 0.3,
    }
    with serve_fake_openai(nap_then_refund) as (_, model_url):
        env = env_for(
            redis_acl,
            redis_prefix,
            redis_extra=fast,
            db_url=pg_url,
            tool_host=refund_host.address,
            model_url=model_url,
        )
        owner, other = start_runtime(tmp_path, env), start_runtime(tmp_path, env)
        try:
            assert gauge(owner, "agentrt_redis_up") == 1 and gauge(other, "agentrt_redis_up") == 1
            with Client(owner.address) as client:
                run_id = client.start_run("refund", "Please refund A100").run_id
            follower = Follower(other.address, run_id)
            follower.start()
            poll(lambda: subscribers(redis_acl, f"{redis_prefix}run:{run_id}") == 1, "never subscribed")
            with Client(owner.address) as client:
                for event in client.stream_events(run_id, follow=True, timeout=30):
                    if event_type(event) == "tool.started":
                        break
            redis_acl.kill()  # mid-run: the nap is in flight
            events = follower.result()
            assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
            assert persisted(events) == list(range(1, len(persisted(events)) + 1))
            assert count_refunds(refund_host.data_dir / "refunds.sqlite") == 1
            for replica in (owner, other):
                poll(lambda r=replica: gauge(r, "agentrt_redis_up") == 0, "the gauge never said down")
                assert replica.counters()["redis_fallback"] == 1
            assert "fall back to store polling" in other.stderr_text()

            redis_acl.start()
            for replica in (owner, other):
                poll(lambda r=replica: gauge(r, "agentrt_redis_up") == 1, "the fan-out never came back")
            # Back: a new run's follower on the non-owner listens on its channel through Redis again.
            with Client(owner.address) as client:
                second = client.start_run("refund", "Please refund A100 again").run_id
            follower = Follower(other.address, second)
            follower.start()
            poll(lambda: subscribers(redis_acl, f"{redis_prefix}run:{second}") == 1, "not resubscribed")
            assert follower.result()[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
            assert other.stderr_text().count("fall back to store polling") == 1  # once per transition
        finally:
            owner.close()
            other.close()


def gauge(runtime: RuntimeProcess, name: str) -> float:
    return runtime.metrics().value(name)


def test_a_wrong_password_stops_the_start_without_showing_it(
    tmp_path: Path, refund_host: ToolHostProcess, redis_acl: RedisServer, redis_prefix: str
) -> None:
    secret = tmp_path / "redis.pw"
    secret.write_text("not-the-password-7Hq\n")
    env = runtime_env(
        db_url=f"sqlite:///{tmp_path / 'a.sqlite'}",
        tool_host=refund_host.address,
        model_url="http://127.0.0.1:9/v1",
        redis={
            "url": redis_acl.url,
            "username": USER,
            "password_file": str(secret),
            "key_prefix": redis_prefix,
        },
    )
    runtime = RuntimeProcess(["--listen", "127.0.0.1:0"], cwd=tmp_path, env=env)
    try:
        assert runtime.wait_exit(60) == 2
        stderr = runtime.stderr_text()
        assert f"refused user {USER!r}" in stderr, stderr[-2000:]
        assert "not-the-password-7Hq" not in stderr and PASSWORD not in stderr
    finally:
        runtime.close()
