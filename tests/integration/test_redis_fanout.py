"""The Redis link and the bus across replicas, in process over a real Redis (two "replicas" = two links).

The machine's Redis (127.0.0.1:6379) with a prefix of each test's own; tests that kill Redis or
configure its ACL or TLS start a redis-server of their own on a free port.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from agentrt.server.config import RedisConfig
from agentrt.server.engine._wakes import ChannelWakes, WakeInbox
from agentrt.server.events import LiveItem, RedisEventBus, RunMessage, Subscription, WakeMessage
from agentrt.server.events._redis import RedisLink
from agentrt.server.events._redis_files import RedisSetupError
from agentrt.server.events._wire import owner_channel, run_channel
from agentrt.server.store import StoredEvent
from agentrt.server.telemetry import Counters
from agentrt.testing.redis_server import RedisServer
from agentrt.toolhost.security import generate_dev_pki

pytestmark = pytest.mark.redis


class Replica:
    """One replica's fan-out parts: bus, link, wake inbox."""

    def __init__(self, config: RedisConfig, origin: str, *, password: str | None = None):
        self.counters = Counters()
        self.bus = RedisEventBus(origin=origin, key_prefix=config.key_prefix, buffer_events=64)
        self.inbox = WakeInbox()
        self.link = RedisLink(
            config=config,
            password=password,
            origin=origin,
            counters=self.counters,
            on_run=self.bus.deliver,
            on_wake=self.inbox.received,
            on_unheard=self.bus.unheard,
            on_interest=self.bus.heard,
        )
        self.wakes = ChannelWakes(link=self.link, key_prefix=config.key_prefix, origin=origin)

    async def start(self) -> None:
        await self.link.start()
        self.bus.attach(self.link)


@asynccontextmanager
async def replicas(config: RedisConfig, *names: str) -> AsyncIterator[list[Replica]]:
    started = [Replica(config, name) for name in names]
    try:
        for replica in started:
            await replica.start()
        yield started
    finally:
        for replica in started:
            await replica.link.close()


async def until(check: Callable[[], Awaitable[bool]], *, within_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + within_s
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def subscribers(url: str, channel: str, **options: str) -> int:
    client = aioredis.Redis.from_url(url, **options)
    try:
        counts = await client.pubsub_numsub(channel)
        return int(counts[0][1])
    finally:
        await client.aclose()


async def next_item(sub: Subscription) -> LiveItem:
    item = await sub.get(wait_s=5)
    assert item is not None, "nothing arrived"
    return item


def delta(run_id: str, text: str) -> StoredEvent:
    return StoredEvent(run_id, 0, "model.text.delta", f'{{"text": "{text}"}}', 1)


async def test_a_publish_reaches_the_other_replicas_followers_as_nudges_and_deltas(
    redis_url: str, redis_prefix: str
) -> None:
    config = RedisConfig(url=redis_url, key_prefix=redis_prefix)
    async with replicas(config, "owner", "other") as (owner, other):
        remote = other.bus.subscribe("r1")
        local = owner.bus.subscribe("r1")
        await until(lambda: _is(subscribers(redis_url, run_channel(redis_prefix, "r1")), 2))
        committed = StoredEvent("r1", 1, "run.started", '{"secret": "stays in the store"}', 1)
        owner.bus.publish("r1", [committed])
        owner.bus.publish("r1", [delta("r1", "Hel")], after_seq=1)

        nudge = await next_item(remote)
        assert nudge.nudge and nudge.event.seq == 1
        assert nudge.event.payload == "" and nudge.event.type == ""  # the fact is read from the store
        text = await next_item(remote)
        assert (text.nudge, text.event.seq, text.after_seq) == (False, 0, 1)
        assert text.event.payload == '{"text": "Hel"}'

        # The owner's own follower got each item once: its echo from Redis is skipped.
        assert (await next_item(local)).event is committed
        assert (await next_item(local)).event.seq == 0
        assert await local.get(wait_s=0.3) is None

        # The last local follower gone, the replica leaves the run's channel.
        other.bus.unsubscribe(remote)
        await until(lambda: _is(subscribers(redis_url, run_channel(redis_prefix, "r1")), 1))


async def test_a_run_nobody_else_hears_stays_local_until_a_replica_listens(
    redis_url: str, redis_prefix: str
) -> None:
    config = RedisConfig(url=redis_url, key_prefix=redis_prefix)
    channel = run_channel(redis_prefix, "r2")
    async with replicas(config, "owner", "other") as (owner, other):
        owner.bus.publish("r2", [delta("r2", "nobody")], after_seq=0)
        await until(lambda: _now("r2" in owner.bus._quiet))  # PUBLISH answered 0 receivers
        eavesdropper = aioredis.Redis.from_url(redis_url).pubsub()
        await eavesdropper.subscribe(channel)
        try:
            confirmed = await eavesdropper.get_message(timeout=5)
            assert confirmed is not None and confirmed["type"] == "subscribe"
            # A bare subscriber announces nothing: the quiet run's publishes stay local.
            owner.bus.publish("r2", [delta("r2", "skipped")], after_seq=0)
            assert await eavesdropper.get_message(ignore_subscribe_messages=True, timeout=0.3) is None
            # A replica listening on the run announces it: the owner publishes the run again.
            remote = other.bus.subscribe("r2")
            await until(lambda: _now("r2" not in owner.bus._quiet))
            owner.bus.publish("r2", [delta("r2", "heard")], after_seq=0)
            assert (await next_item(remote)).event.payload == '{"text": "heard"}'
            got = await eavesdropper.get_message(ignore_subscribe_messages=True, timeout=5)
            assert got is not None and b"heard" in got["data"]
        finally:
            await eavesdropper.aclose()


async def test_a_failing_handler_costs_a_reconnect_not_the_link(
    redis_url: str, redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = RedisConfig(url=redis_url, key_prefix=redis_prefix, reconnect_base_s=0.05, reconnect_cap_s=0.1)
    async with replicas(config, "owner", "other") as (owner, other):
        remote = other.bus.subscribe("r1")
        calls = 0

        def flaky(message: RunMessage) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise RuntimeError("a bug in a handler")
            other.bus.deliver(message)

        other.link._on_run = flaky
        await until(lambda: _is(subscribers(redis_url, run_channel(redis_prefix, "r1")), 1))
        owner.bus.publish("r1", [delta("r1", "first")], after_seq=0)
        await until(lambda: _now(other.counters.get("redis_fallback") == 1))
        assert "the redis link failed" in caplog.text
        await until(lambda: _now(other.link.up is True))
        await until(lambda: _is(subscribers(redis_url, run_channel(redis_prefix, "r1")), 1))
        owner.bus.publish("r1", [delta("r1", "second")], after_seq=0)
        assert (await next_item(remote)).event.payload == '{"text": "second"}'


async def test_a_full_follower_buffer_pauses_instead_of_queueing(redis_url: str, redis_prefix: str) -> None:
    config = RedisConfig(url=redis_url, key_prefix=redis_prefix)
    async with replicas(config, "owner", "other") as (owner, other):
        remote = other.bus.subscribe("r1", max_events=3)
        await until(lambda: _is(subscribers(redis_url, run_channel(redis_prefix, "r1")), 1))
        owner.bus.publish("r1", [delta("r1", str(n)) for n in range(10)], after_seq=0)
        await until(lambda: _now(remote.paused))
        assert remote.buffered_events == 3 and remote.dropped == 7


async def test_a_wake_reaches_the_owner_once_however_often_it_was_sent(
    redis_url: str, redis_prefix: str
) -> None:
    config = RedisConfig(url=redis_url, key_prefix=redis_prefix)
    async with replicas(config, "api", "owner") as (api, owner):
        await until(lambda: _is(subscribers(redis_url, owner_channel(redis_prefix, "owner")), 1))
        woken: list[str] = []
        done = asyncio.Event()

        async def on_wake(run_id: str) -> None:
            woken.append(run_id)
            done.set()

        api.wakes.wake_owner("r1", "owner")
        api.wakes.wake_owner("r2", "api")  # its own: never sent
        served = asyncio.create_task(owner.inbox.run_forever(on_wake))
        try:
            await asyncio.wait_for(done.wait(), 5)
            assert woken == ["r1"]
        finally:
            served.cancel()
        for _ in range(3):  # pending together: acted on once
            owner.inbox.received(WakeMessage("api", "r3"))
        assert list(owner.inbox._pending) == ["r3"]


async def test_redis_killed_falls_back_counts_once_and_recovers(
    tmp_path: Path, redis_server_binary: None, redis_prefix: str
) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        config = RedisConfig(
            url=server.url,
            key_prefix=redis_prefix,
            command_timeout_s=0.5,
            health_interval_s=0.2,
            reconnect_base_s=0.05,
            reconnect_cap_s=0.2,
        )
        async with replicas(config, "owner", "other") as (owner, other):
            remote = other.bus.subscribe("r1")
            await until(lambda: _is(subscribers(server.url, run_channel(redis_prefix, "r1")), 1))
            server.kill()
            await until(lambda: _now(owner.link.up is False and other.link.up is False))
            for _ in range(20):  # while down: dropped at once, never queued, never counted again
                owner.bus.publish("r1", [delta("r1", "lost")], after_seq=0)
            await asyncio.sleep(0.5)  # several failed reconnects: still one transition each
            assert owner.counters.get("redis_fallback") == 1
            assert other.counters.get("redis_fallback") == 1
            assert remote.buffered_events == 0

            server.start()
            await until(lambda: _now(bool(owner.link.up and other.link.up)))
            # The follower's channel is subscribed again, and the fan-out carries items again.
            await until(lambda: _is(subscribers(server.url, run_channel(redis_prefix, "r1")), 1))
            owner.bus.publish("r1", [delta("r1", "back")], after_seq=0)
            item = await next_item(remote)
            assert item.event.payload == '{"text": "back"}'
            assert owner.counters.get("redis_fallback") == 1
    finally:
        server.stop()


async def test_a_partition_is_noticed_by_the_probe_and_healed(
    tmp_path: Path, redis_server_binary: None, redis_prefix: str
) -> None:
    # SIGSTOP: connections stay open and nothing answers, as behind a partition (no FIN, no RST).
    server = RedisServer(tmp_path / "redis")
    server.start()
    assert server.process is not None
    try:
        config = RedisConfig(
            url=server.url,
            key_prefix=redis_prefix,
            command_timeout_s=0.3,
            health_interval_s=0.1,
            reconnect_base_s=0.05,
            reconnect_cap_s=0.2,
        )
        async with replicas(config, "owner") as (owner,):
            assert owner.link.up is True
            server.process.send_signal(signal.SIGSTOP)
            began = asyncio.get_running_loop().time()
            await until(lambda: _now(owner.link.up is False), within_s=5)
            assert asyncio.get_running_loop().time() - began < 2  # probe period + command timeout
            assert owner.counters.get("redis_fallback") == 1
            server.process.send_signal(signal.SIGCONT)
            await until(lambda: _now(owner.link.up is True), within_s=10)
            assert owner.counters.get("redis_fallback") == 1
    finally:
        if server.process is not None:
            server.process.send_signal(signal.SIGCONT)
        server.stop()


async def test_an_unreachable_redis_at_start_is_store_polling_not_an_error(redis_prefix: str) -> None:
    config = RedisConfig(url="redis://127.0.0.1:1", key_prefix=redis_prefix, connect_timeout_s=0.5)
    async with replicas(config, "lonely") as (lonely,):
        assert lonely.link.up is False
        assert lonely.counters.get("redis_fallback") == 1


async def test_acl_user_and_password_and_a_wrong_password(
    tmp_path: Path, redis_server_binary: None, redis_prefix: str
) -> None:
    with RedisServer(
        tmp_path / "redis", users={"agentrt": "right-pass-1"}, channel_prefix=redis_prefix
    ) as server:
        config = RedisConfig(url=server.url, username="agentrt", key_prefix=redis_prefix)
        good = Replica(config, "good", password="right-pass-1")
        await good.start()
        try:
            assert good.link.up is True
        finally:
            await good.link.close()

        bad = Replica(config, "bad", password="wrong-pass-2")
        with pytest.raises(RedisSetupError) as refused:
            await bad.start()
        assert "refused user 'agentrt'" in str(refused.value)
        assert "wrong-pass-2" not in str(refused.value) and "right-pass-1" not in str(refused.value)

        # A prefix outside the user's channels: the ACL, not the password, is at fault.
        outside = Replica(
            config.model_copy(update={"key_prefix": "elsewhere:"}), "x", password="right-pass-1"
        )
        with pytest.raises(RedisSetupError, match="ACL"):
            await outside.start()


async def test_rediss_with_a_ca_file(tmp_path: Path, redis_server_binary: None, redis_prefix: str) -> None:
    pki = generate_dev_pki(tmp_path / "pki")
    tls = (pki.ca_file, pki.server_cert_file, pki.server_key_file)
    with RedisServer(tmp_path / "redis", tls=tls) as server:
        config = RedisConfig(url=server.url, ca_file=str(pki.ca_file), key_prefix=redis_prefix)
        async with replicas(config, "owner", "other") as (owner, other):
            assert owner.link.up and other.link.up
            remote = other.bus.subscribe("r1")
            channel = run_channel(redis_prefix, "r1")
            await until(lambda: _is(subscribers(server.url, channel, ssl_ca_certs=str(pki.ca_file)), 1))
            owner.bus.publish("r1", [delta("r1", "tls")], after_seq=0)
            assert (await next_item(remote)).event.payload == '{"text": "tls"}'


async def _is(count: Awaitable[int], wanted: int) -> bool:
    return await count == wanted


async def _now(value: bool) -> bool:
    return value
