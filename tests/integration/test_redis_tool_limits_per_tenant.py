"""Per-tenant caps of a tool's calls over all replicas, counted in Redis: two SharedToolSlots as
two replicas sharing one real Redis (tools/_shared_slots.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio as aioredis

from agentrt.server.config import RedisConfig
from agentrt.server.events._redis_client import redis_client
from agentrt.server.tools import SlotTimeout, ToolSlots
from agentrt.server.tools._shared_slots import SharedToolSlots

pytestmark = pytest.mark.redis

TOOL = "pay.out"
Pair = tuple[SharedToolSlots, SharedToolSlots]


def replica(redis_url: str, redis_prefix: str, **options: float) -> SharedToolSlots:
    return SharedToolSlots.replacing(
        ToolSlots(default_per_tenant=2),
        client=redis_client(RedisConfig(url=redis_url)),
        key_prefix=redis_prefix,
        **options,
    )


@pytest.fixture
async def two_replicas(redis_url: str, redis_prefix: str) -> AsyncIterator[Pair]:
    pair = (replica(redis_url, redis_prefix), replica(redis_url, redis_prefix))
    yield pair
    for slots in pair:
        await slots.aclose()


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    redis = aioredis.Redis.from_url(redis_url)
    yield redis
    await redis.aclose()


async def until(condition: Callable[[], bool], within_s: float = 10.0) -> None:
    async with asyncio.timeout(within_s):
        while True:  # a bounded poll: the counts change without an event to wait on
            if condition():
                return
            await asyncio.sleep(0.005)


async def test_two_replicas_share_one_tenants_cap_and_other_tenants_pass(two_replicas: Pair) -> None:
    inside = {"acme": 0, "globex": 0}
    most = {"acme": 0, "globex": 0}
    release_acme, release_globex = asyncio.Event(), asyncio.Event()

    async def call(slots: SharedToolSlots, tenant: str, release: asyncio.Event) -> None:
        async with slots.hold(TOOL, 10, timeout_s=20, tenant=tenant, tenant_limit=2):
            inside[tenant] += 1
            most[tenant] = max(most[tenant], inside[tenant])
            await release.wait()
            inside[tenant] -= 1

    acme = [
        asyncio.create_task(call(slots, "acme", release_acme)) for slots in two_replicas for _ in range(3)
    ]
    await until(lambda: inside["acme"] == 2)
    # Each replica's own cap would let 2 in, 4 in all; while acme is held at 2, globex gets in on
    # both replicas.
    globex = [asyncio.create_task(call(slots, "globex", release_globex)) for slots in two_replicas]
    await until(lambda: inside["globex"] == 2)
    assert inside["acme"] == 2
    release_globex.set()
    release_acme.set()
    async with asyncio.timeout(20):
        await asyncio.gather(*acme, *globex)
    assert most == {"acme": 2, "globex": 2}
    assert all(slots.reachable and slots.tenants_tracked() == 0 for slots in two_replicas)


async def test_a_tenant_at_its_global_cap_times_out_and_its_holds_go_back_after(
    two_replicas: Pair, client: aioredis.Redis
) -> None:
    first, second = two_replicas
    async with first.hold(TOOL, 10, 5, tenant="acme", tenant_limit=1):
        with pytest.raises(SlotTimeout, match=r"for this tenant .* over all replicas") as caught:
            async with second.hold(TOOL, 10, 0.3, tenant="acme", tenant_limit=1):
                pytest.fail("a second call of a tenant capped at 1 got in")
        assert caught.value.per_tenant and caught.value.limit == 1
        assert await client.zcard(first.tenant_key(TOOL, "acme")) == 1
        assert await client.zcard(first.tool_key(TOOL)) == 1
    assert await client.zcard(first.tenant_key(TOOL, "acme")) == 0
    assert await client.zcard(first.tool_key(TOOL)) == 0
    async with second.hold(TOOL, 10, 5, tenant="acme", tenant_limit=1) as waited:  # free at once
        assert waited < 1


async def test_no_tool_slot_in_time_gives_back_the_tenants_global_slot(
    two_replicas: Pair, client: aioredis.Redis
) -> None:
    first, second = two_replicas
    async with first.hold(TOOL, 1, 5, tenant="globex", tenant_limit=1):
        with pytest.raises(SlotTimeout, match="over all replicas") as caught:
            async with second.hold(TOOL, 1, 0.3, tenant="acme", tenant_limit=1):
                pytest.fail("got the tool's only slot")
        assert not caught.value.per_tenant
        assert await client.zcard(second.tenant_key(TOOL, "acme")) == 0
    assert second.tenants_tracked() == 0


async def test_a_cancelled_call_gives_back_both_holds(two_replicas: Pair, client: aioredis.Redis) -> None:
    first, _ = two_replicas
    inside = asyncio.Event()

    async def call() -> None:
        async with first.hold(TOOL, 3, 20, tenant="acme", tenant_limit=1):
            inside.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(call())
    await asyncio.wait_for(inside.wait(), 10)
    keys = [first.tenant_key(TOOL, "acme"), first.tool_key(TOOL)]
    assert [await client.zcard(key) for key in keys] == [1, 1]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [await client.zcard(key) for key in keys] == [0, 0]
    assert first.busy(TOOL) == 0 and first.tenants_tracked() == 0


async def test_tenant_ids_are_hashed_into_keys_no_tenant_can_choose(
    two_replicas: Pair, client: aioredis.Redis, redis_prefix: str
) -> None:
    first, _ = two_replicas
    hostile = f"x\n{redis_prefix}slots:{TOOL}"  # as if to count against the tool's own set
    digest = hashlib.sha256(hostile.encode()).hexdigest()[:32]
    assert first.tenant_key(TOOL, hostile) == f"{redis_prefix}tenant-slots:{TOOL}:{digest}"
    # A tool whose name ends like a tenant key still has a key of its own family.
    assert first.tool_key(f"{TOOL}:{digest}") != first.tenant_key(TOOL, hostile)
    async with first.hold(TOOL, 0, 5, tenant=hostile, tenant_limit=1):
        keys = {key.decode() async for key in client.scan_iter(match=f"{redis_prefix}*")}
        assert keys == {first.tenant_key(TOOL, hostile)}


async def test_a_long_call_keeps_both_holds_past_their_lease(redis_url: str, redis_prefix: str) -> None:
    pair = [replica(redis_url, redis_prefix, lease_s=0.3) for _ in range(2)]
    try:
        first, second = pair
        async with first.hold(TOOL, 1, 10, tenant="acme", tenant_limit=1):
            await asyncio.sleep(0.8)  # past two leases: only the renewals keep the holds
            with pytest.raises(SlotTimeout, match="for this tenant"):
                async with second.hold(TOOL, 1, 0.2, tenant="acme", tenant_limit=1):
                    pytest.fail("the tenant's hold expired while its call ran")
            with pytest.raises(SlotTimeout, match="at most 1 calls at once over all replicas"):
                async with second.hold(TOOL, 1, 0.2, tenant="globex", tenant_limit=1):
                    pytest.fail("the tool's hold expired while its call ran")
    finally:
        for slots in pair:
            await slots.aclose()


async def test_a_dead_replicas_tenant_hold_frees_up_when_its_lease_ends(
    two_replicas: Pair, client: aioredis.Redis
) -> None:
    first, _ = two_replicas
    seconds, micros = await client.time()
    await client.zadd(first.tenant_key(TOOL, "acme"), {"killed": seconds * 1000 + micros // 1000 + 400})
    async with first.hold(TOOL, 0, 5, tenant="acme", tenant_limit=1) as waited:
        assert 0.2 < waited < 3


async def test_unreachable_redis_falls_back_to_the_process_cap_per_tenant(redis_prefix: str) -> None:
    client = redis_client(RedisConfig(url="redis://127.0.0.1:1", connect_timeout_s=0.5))
    slots = SharedToolSlots.replacing(
        ToolSlots(default_per_tenant=1), client=client, key_prefix=redis_prefix, command_timeout_s=0.5
    )
    try:
        async with slots.hold(TOOL, 5, 5, tenant="acme", tenant_limit=1):
            assert not slots.reachable
            with pytest.raises(SlotTimeout, match="for this tenant"):  # the process's own cap holds
                async with slots.hold(TOOL, 5, 0.2, tenant="acme", tenant_limit=1):
                    pass
            async with slots.hold(TOOL, 5, 5, tenant="globex", tenant_limit=1):
                pass
    finally:
        await slots.aclose()


async def test_a_call_cancelled_while_polling_for_the_tool_gives_back_its_tenant_hold(
    two_replicas: Pair, client: aioredis.Redis
) -> None:
    first, second = two_replicas
    async with first.hold(TOOL, 1, 20, tenant="globex", tenant_limit=1):
        waiting = asyncio.create_task(second.hold(TOOL, 1, 20, tenant="acme", tenant_limit=1).__aenter__())
        key = second.tenant_key(TOOL, "acme")
        async with asyncio.timeout(10):
            while True:  # a bounded poll: acme holds its tenant's slot and polls for the tool's
                if await client.zcard(key) == 1:
                    break
                await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert await client.zcard(key) == 0
        assert second.busy(TOOL) == 0 and second.tenants_tracked() == 0


async def test_a_tenant_hold_is_renewed_while_its_call_polls_for_the_tool(
    redis_url: str, redis_prefix: str
) -> None:
    pair = [replica(redis_url, redis_prefix, lease_s=0.3) for _ in range(2)]
    try:
        first, second = pair
        async with first.hold(TOOL, 1, 10, tenant="globex", tenant_limit=1):
            waiting = asyncio.create_task(
                second.hold(TOOL, 1, 10, tenant="acme", tenant_limit=1).__aenter__()
            )
            await until(lambda: second.tenant_busy(TOOL, "acme") == 1)
            await asyncio.sleep(0.8)  # past two leases of acme's hold while it waits for the tool
            with pytest.raises(SlotTimeout, match="for this tenant"):
                async with first.hold(TOOL, 0, 0.2, tenant="acme", tenant_limit=1):
                    pytest.fail("acme's hold expired while its call waited for the tool")
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
    finally:
        for slots in pair:
            await slots.aclose()


async def test_a_cancel_landing_at_any_moment_of_the_poll_ends_the_wait(two_replicas: Pair) -> None:
    """Hunts the lost cancel: one landing as a Redis write completed was dropped on Python 3.11
    (asyncio.wait_for inside redis-py, CPython gh-86296), and the call polled on until its
    deadline. Cancels land at random moments of the poll, 120 times (before the fix: ~5% lost)."""
    first, second = two_replicas
    rand = random.Random(20261203)
    async with first.hold(TOOL, 1, 60, tenant="globex", tenant_limit=1):
        for attempt in range(120):
            waiting = asyncio.create_task(
                second.hold(TOOL, 1, 30, tenant="acme", tenant_limit=1).__aenter__()
            )
            await asyncio.sleep(rand.uniform(0, 0.03))
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                async with asyncio.timeout(5):  # a lost cancel polls on: TimeoutError, not this
                    await waiting
            assert second.busy(TOOL) == 0 and second.tenants_tracked() == 0, attempt


class ReplyHoldingProxy:
    """A TCP proxy to Redis that, while ``holding``, keeps the server's replies to itself: a
    command has run in Redis, and its caller has not heard back."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.holding = False
        self._released = asyncio.Event()
        self.reply_held = asyncio.Event()  # a reply came back from Redis and is being kept
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"redis://127.0.0.1:{port}/0"

    def release(self) -> None:
        self.holding = False
        self._released.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        for task in (
            asyncio.create_task(self._pipe(reader, up_writer, hold=False)),
            asyncio.create_task(self._pipe(up_reader, writer, hold=True)),
        ):
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, hold: bool) -> None:
        try:
            while data := await reader.read(65536):
                if hold and self.holding:
                    self.reply_held.set()
                    await self._released.wait()
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def close(self) -> None:
        for task in list(self._pipes):
            task.cancel()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


async def test_a_slot_taken_just_as_its_call_is_cancelled_is_given_back_at_once(
    redis_url: str, redis_prefix: str, client: aioredis.Redis
) -> None:
    """The take ran in Redis but its reply had not come back when the cancel landed: the slot
    is given back then, not held (every replica's calls of the tool kept out) for its lease."""
    upstream = aioredis.Redis.from_url(redis_url).connection_pool.connection_kwargs
    proxy = ReplyHoldingProxy(upstream["host"], upstream["port"])
    slots = SharedToolSlots.replacing(
        ToolSlots(), client=redis_client(RedisConfig(url=await proxy.start())), key_prefix=redis_prefix
    )
    try:
        await slots.check()  # the connection is up, and the scripts are loaded, before holding
        key = slots.tool_key(TOOL)
        proxy.holding = True
        waiting = asyncio.create_task(slots.hold(TOOL, 1, 30).__aenter__())
        async with asyncio.timeout(10):
            await proxy.reply_held.wait()  # the take has run in Redis; its caller has not heard
        assert await client.zcard(key) == 1
        waiting.cancel()
        proxy.release()  # before the cancel lands: the give-back's reply must get through
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert await client.zcard(key) == 0, "the slot stays held until its lease ends"
    finally:
        await slots.aclose()
        await proxy.close()
