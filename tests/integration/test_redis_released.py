"""The released nudge over a real Redis, in process: two links, as two replicas.

The machine's Redis (127.0.0.1:6379) with a prefix of the test's own; the partition test starts a
redis-server of its own.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from agentrt.server.config import RedisConfig
from agentrt.server.engine import ChannelWakes, ReleasedInbox
from agentrt.server.events import RunMessage, WakeMessage
from agentrt.server.events._redis import RedisLink
from agentrt.server.events._wire import encode_released, released_channel
from agentrt.server.telemetry import Counters
from agentrt.testing.redis_server import RedisServer
from tests.integration.test_redis_fanout import _is, subscribers, until

pytestmark = pytest.mark.redis


class Replica:
    """One replica's released path: its link, what it sends, the inbox it hands claims from."""

    def __init__(self, config: RedisConfig, origin: str):
        self.inbox = ReleasedInbox(origin=origin)
        self.link = RedisLink(
            config=config,
            password=None,
            origin=origin,
            counters=Counters(),
            on_run=self._ignore_run,
            on_wake=self._ignore_wake,
            on_released=self.inbox.received,
        )
        self.sender = ChannelWakes(link=self.link, key_prefix=config.key_prefix, origin=origin)
        self.claimed: list[list[str]] = []
        self.arrived = asyncio.Event()

    @staticmethod
    def _ignore_run(message: RunMessage) -> None:
        pass

    @staticmethod
    def _ignore_wake(message: WakeMessage) -> None:
        pass

    async def claim(self, run_ids: list[str]) -> None:  # what Engine.on_released is handed
        self.claimed.append(run_ids)
        self.arrived.set()

    async def claimed_once(self) -> list[str]:
        async with asyncio.timeout(5):
            await self.arrived.wait()
        self.arrived.clear()
        return self.claimed[-1]


@asynccontextmanager
async def replicas(config: RedisConfig, *names: str) -> AsyncIterator[list[Replica]]:
    started = [Replica(config, name) for name in names]
    tasks = []
    try:
        for replica in started:
            await replica.link.start()
            tasks.append(asyncio.create_task(replica.inbox.run_forever(replica.claim)))
        yield started
    finally:
        for task in tasks:
            task.cancel()
        for replica in started:
            await replica.link.close()


async def test_released_runs_reach_every_other_replica_in_one_batch_not_the_sender(
    redis_url: str, redis_prefix: str
) -> None:
    config = RedisConfig(url=redis_url, key_prefix=redis_prefix)
    channel = released_channel(redis_prefix)
    async with replicas(config, "draining", "b", "c") as (draining, b, c):
        await until(lambda: _is(subscribers(redis_url, channel), 3))  # every replica listens
        draining.sender.released(["r1", "r2", "r3"])
        await draining.link.flush(5)
        assert await b.claimed_once() == ["r1", "r2", "r3"]
        assert await c.claimed_once() == ["r1", "r2", "r3"]
        assert draining.claimed == []  # its own message is not for it


async def test_a_malformed_message_on_the_channel_is_counted_and_the_next_one_still_arrives(
    redis_url: str, redis_prefix: str
) -> None:
    config = RedisConfig(url=redis_url, key_prefix=redis_prefix)
    channel = released_channel(redis_prefix)
    async with replicas(config, "b") as (b,):
        await until(lambda: _is(subscribers(redis_url, channel), 1))
        stranger = aioredis.Redis.from_url(redis_url)  # Redis may be shared: anyone can publish
        try:
            await stranger.publish(channel, b'{"o": "x", "x": "not a list"}')
            await stranger.publish(channel, encode_released("a", ["r9"])[0])
        finally:
            await stranger.aclose()
        assert await b.claimed_once() == ["r9"]
        assert b.inbox.malformed == 1
        assert b.link.up is True  # dropped, not a reconnect


async def test_flush_returns_at_once_while_down_and_publishes_are_dropped(redis_prefix: str) -> None:
    config = RedisConfig(url="redis://127.0.0.1:1", key_prefix=redis_prefix, connect_timeout_s=0.5)
    async with replicas(config, "lonely") as (lonely,):
        assert lonely.link.up is False
        lonely.sender.released(["r1"])  # dropped: the poll loop finds the run
        async with asyncio.timeout(1):
            await lonely.link.flush(30)


async def test_flush_behind_a_partition_gives_up_after_its_bound(
    tmp_path: Path, redis_server_binary: None, redis_prefix: str
) -> None:
    # SIGSTOP: the link still looks up and nothing answers, as behind a partition.
    server = RedisServer(tmp_path / "redis")
    server.start()
    assert server.process is not None
    try:
        config = RedisConfig(
            url=server.url, key_prefix=redis_prefix, command_timeout_s=5, health_interval_s=5
        )
        async with replicas(config, "draining") as (draining,):
            assert draining.link.up is True
            server.process.send_signal(signal.SIGSTOP)
            draining.sender.released(["r1"])
            began = asyncio.get_running_loop().time()
            await draining.link.flush(0.3)  # a drain's close waits this long at most
            assert 0.25 <= asyncio.get_running_loop().time() - began < 2  # it did wait for the write
    finally:
        if server.process is not None:
            server.process.send_signal(signal.SIGCONT)
        server.stop()
