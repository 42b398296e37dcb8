"""Tool concurrency limits over all replicas, counted in Redis: two ToolSlots sharing one Redis."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from agentrt.server.config import RedisConfig
from agentrt.server.events._redis_client import redis_client
from agentrt.server.tools import ToolSlots
from agentrt.server.tools._shared_slots import SharedToolSlots, SlotsNotPermitted
from agentrt.server.tools._slots import SlotTimeout
from agentrt.testing.redis_server import RedisServer

pytestmark = pytest.mark.redis


@pytest.fixture
async def two_replicas(
    redis_url: str, redis_prefix: str
) -> AsyncIterator[tuple[SharedToolSlots, SharedToolSlots]]:
    pair = tuple(
        SharedToolSlots.replacing(
            ToolSlots(), client=redis_client(RedisConfig(url=redis_url)), key_prefix=redis_prefix
        )
        for _ in range(2)
    )
    yield pair  # type: ignore[misc]
    for slots in pair:
        await slots.aclose()


async def test_a_limit_holds_over_both_replicas(
    two_replicas: tuple[SharedToolSlots, SharedToolSlots],
) -> None:
    inside: list[int] = []
    now = 0
    release, two_in = asyncio.Event(), asyncio.Event()

    async def call(slots: SharedToolSlots) -> None:
        nonlocal now
        async with slots.hold("pay.out", 2, timeout_s=20):
            now += 1
            inside.append(now)
            if len(inside) == 2:
                two_in.set()
            await release.wait()
            now -= 1

    calls = [asyncio.create_task(call(slots)) for slots in two_replicas for _ in range(3)]
    await asyncio.wait_for(two_in.wait(), 10)
    # Each replica's own limit would let 2 in, 4 in all: the shared count keeps it at 2.
    for _ in range(20):
        await asyncio.sleep(0.01)
        assert len(inside) == 2
    release.set()
    async with asyncio.timeout(10):
        await asyncio.gather(*calls)
    assert len(inside) == 6 and max(inside) == 2
    assert all(slots.reachable for slots in two_replicas)


async def test_no_free_slot_before_the_deadline_is_a_slot_timeout(
    two_replicas: tuple[SharedToolSlots, SharedToolSlots],
) -> None:
    first, second = two_replicas
    async with first.hold("pay.out", 1, timeout_s=5):
        with pytest.raises(SlotTimeout, match="over all replicas"):
            async with second.hold("pay.out", 1, timeout_s=0.3):
                pytest.fail("a second call got the only slot")
    async with second.hold("pay.out", 1, timeout_s=5) as waited:  # given back: free at once
        assert waited < 1


async def test_a_dead_replicas_slot_frees_up_when_its_lease_ends(
    redis_url: str, redis_prefix: str, two_replicas: tuple[SharedToolSlots, SharedToolSlots]
) -> None:
    client = aioredis.Redis.from_url(redis_url)
    try:
        seconds, micros = await client.time()
        # A hold of a replica killed mid-call: nobody renews or gives it back; 400 ms of lease left.
        await client.zadd(f"{redis_prefix}slots:pay.out", {"killed": seconds * 1000 + micros // 1000 + 400})
    finally:
        await client.aclose()
    async with two_replicas[0].hold("pay.out", 1, timeout_s=5) as waited:
        assert 0.2 < waited < 3


async def test_unreachable_redis_falls_back_to_the_process_limit(redis_prefix: str) -> None:
    client = redis_client(RedisConfig(url="redis://127.0.0.1:1", connect_timeout_s=0.5))
    slots = SharedToolSlots.replacing(
        ToolSlots(limits={"pay.out": 1}), client=client, key_prefix=redis_prefix, command_timeout_s=0.5
    )
    try:
        async with slots.hold("pay.out", 1, timeout_s=5):
            assert not slots.reachable
            with pytest.raises(SlotTimeout):  # the process's own limit still holds
                async with slots.hold("pay.out", 1, timeout_s=0.2):
                    pass
    finally:
        await slots.aclose()


async def test_an_acl_without_the_slot_commands_fails_the_check(
    tmp_path: Path, redis_server_binary: None, redis_prefix: str
) -> None:
    with RedisServer(tmp_path / "redis", users={"rt": "pw-1"}, channel_prefix=redis_prefix) as server:
        for prefix, allowed in ((redis_prefix, True), ("elsewhere:", False)):
            client = redis_client(RedisConfig(url=server.url, username="rt"), "pw-1")
            slots = SharedToolSlots.replacing(ToolSlots(), client=client, key_prefix=prefix)
            try:
                if allowed:
                    await slots.check()
                    assert slots.reachable
                else:
                    with pytest.raises(SlotsNotPermitted, match="ACL denies"):
                        await slots.check()
            finally:
                await slots.aclose()
