"""Per-tenant caps of a tool's concurrent calls in one process (tools/_slots.py), and their config.

A call takes its tenant's slot of the tool, then the tool's slot; both go back however the call
ends; a tenant at its cap neither blocks other tenants nor holds a tool slot while it waits; and
the per-tenant semaphores are forgotten once idle, whatever the number of tenants.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from agentrt.server.config import ConfigError, load_settings
from agentrt.server.tools import SlotTimeout, ToolSlots

TOOL = "sleep.wait"


async def until(condition: Callable[[], bool], within_s: float = 5.0) -> None:
    async with asyncio.timeout(within_s):
        while True:  # a bounded poll: the counts change without an event to wait on
            if condition():
                return
            await asyncio.sleep(0.001)


async def holder(slots: ToolSlots, tenant: str, release: asyncio.Event, *, limit: int = 4) -> float:
    async with slots.hold(TOOL, limit, 30, tenant=tenant, tenant_limit=slots.tenant_limit(TOOL)) as waited:
        await release.wait()
    return waited


async def test_a_tenant_at_its_cap_does_not_block_another_tenant() -> None:
    slots = ToolSlots(default_per_tenant=1)
    release_a, release_b = asyncio.Event(), asyncio.Event()
    first = asyncio.create_task(holder(slots, "acme", release_a))
    await until(lambda: slots.tenant_busy(TOOL, "acme") == 1)
    queued = [asyncio.create_task(holder(slots, "acme", release_a)) for _ in range(3)]
    await until(lambda: slots.tenants_tracked() == 1 and not any(t.done() for t in queued))
    # acme's waiters wait for acme's slot, not a tool slot: 3 of the tool's 4 are still free.
    assert slots.busy(TOOL) == 1
    other = asyncio.create_task(holder(slots, "globex", release_b))
    await until(lambda: slots.tenant_busy(TOOL, "globex") == 1)
    assert slots.busy(TOOL) == 2 and slots.tenant_busy(TOOL, "acme") == 1
    release_b.set()
    assert await other < 1
    assert not any(t.done() for t in queued)  # still capped: acme's first call holds its one slot
    release_a.set()
    async with asyncio.timeout(5):
        await asyncio.gather(first, *queued)
    assert slots.busy(TOOL) == 0 and slots.tenants_tracked() == 0


async def test_a_tenant_past_its_cap_times_out_as_a_per_tenant_slot_timeout() -> None:
    slots = ToolSlots(per_tenant={TOOL: 2})
    release = asyncio.Event()
    held = [asyncio.create_task(holder(slots, "acme", release)) for _ in range(2)]
    await until(lambda: slots.tenant_busy(TOOL, "acme") == 2)
    with pytest.raises(SlotTimeout, match="for this tenant") as caught:
        async with slots.hold(TOOL, 4, 0.05, tenant="acme", tenant_limit=2):
            pytest.fail("a third call of a tenant capped at 2 got in")
    assert caught.value.per_tenant and caught.value.limit == 2 and caught.value.tool == TOOL
    async with slots.hold(TOOL, 4, 0.05, tenant="globex", tenant_limit=2) as waited:
        assert waited < 0.05
    release.set()
    await asyncio.gather(*held)
    assert slots.tenants_tracked() == 0


async def test_a_call_cut_while_waiting_for_the_tool_slot_gives_back_its_tenant_slot() -> None:
    slots = ToolSlots(default_per_tenant=1)
    release = asyncio.Event()
    blocker = asyncio.create_task(holder(slots, "globex", release, limit=1))
    await until(lambda: slots.busy(TOOL) == 1)
    # Timeout: acme got its own slot, then found the tool's only slot taken.
    with pytest.raises(SlotTimeout, match="at most 1 calls at once") as caught:
        async with slots.hold(TOOL, 1, 0.05, tenant="acme", tenant_limit=1):
            pytest.fail("got the tool's only slot")
    assert not caught.value.per_tenant
    assert slots.tenant_busy(TOOL, "acme") == 0 and slots.tenants_tracked() == 1  # globex's
    # Cancel: the same, cut by its caller instead of its deadline.
    waiting = asyncio.create_task(holder(slots, "acme", asyncio.Event(), limit=1))
    await until(lambda: slots.tenant_busy(TOOL, "acme") == 1)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert slots.tenant_busy(TOOL, "acme") == 0 and slots.tenants_tracked() == 1
    release.set()
    await blocker
    assert slots.busy(TOOL) == 0 and slots.tenants_tracked() == 0


async def test_both_slots_go_back_when_the_call_is_cancelled_or_raises() -> None:
    slots = ToolSlots(default_per_tenant=1)
    inside = asyncio.Event()

    async def call() -> None:
        async with slots.hold(TOOL, 1, 30, tenant="acme", tenant_limit=1):
            inside.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(call())
    await inside.wait()
    assert slots.busy(TOOL) == 1 and slots.tenant_busy(TOOL, "acme") == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert slots.busy(TOOL) == 0 and slots.tenants_tracked() == 0

    with pytest.raises(RuntimeError, match="tool failed"):
        async with slots.hold(TOOL, 1, 30, tenant="acme", tenant_limit=1):
            raise RuntimeError("tool failed")
    assert slots.busy(TOOL) == 0 and slots.tenants_tracked() == 0
    async with slots.hold(TOOL, 1, 0.05, tenant="acme", tenant_limit=1) as waited:  # free at once
        assert waited < 0.05


async def test_a_call_cancelled_while_waiting_for_its_tenant_slot_leaves_nothing_behind() -> None:
    slots = ToolSlots(default_per_tenant=1)
    release = asyncio.Event()
    first = asyncio.create_task(holder(slots, "acme", release))
    await until(lambda: slots.tenant_busy(TOOL, "acme") == 1)
    second = asyncio.create_task(holder(slots, "acme", release))
    await until(lambda: slots._tenants[(TOOL, "acme")].users == 2)  # it waits for acme's slot
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    assert slots.busy(TOOL) == 1 and slots.tenant_busy(TOOL, "acme") == 1
    release.set()
    await first
    assert slots.tenants_tracked() == 0


async def test_a_per_tenant_cap_holds_on_a_tool_without_a_limit_of_its_own() -> None:
    slots = ToolSlots(per_tenant={TOOL: 1})
    assert slots.limit(TOOL, None) == 0 and slots.tenant_limit(TOOL) == 1
    assert slots.tenant_limit("noop.echo") == 0
    async with slots.hold(TOOL, 0, 1, tenant="acme", tenant_limit=1):
        assert slots.busy(TOOL) == 0 and slots.tenant_busy(TOOL, "acme") == 1
        with pytest.raises(SlotTimeout, match="for this tenant"):
            async with slots.hold(TOOL, 0, 0.05, tenant="acme", tenant_limit=1):
                pass
        async with slots.hold(TOOL, 0, 0.05, tenant="", tenant_limit=1):  # no tenant is one too
            pass


async def test_memory_follows_the_calls_in_flight_not_the_tenants_seen() -> None:
    slots = ToolSlots(default_per_tenant=2)
    for n in range(2000):
        async with slots.hold(TOOL, 8, 1, tenant=f"tenant-{n}", tenant_limit=2):
            assert slots.tenants_tracked() == 1
    assert slots.tenants_tracked() == 0


def test_negative_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="default_per_tenant"):
        ToolSlots(default_per_tenant=-1)
    with pytest.raises(ValueError, match=TOOL):
        ToolSlots(per_tenant={TOOL: -2})


def test_the_per_tenant_cap_is_off_by_default_and_read_from_tool_limits() -> None:
    limits = load_settings(env={}).tool_limits
    assert limits.default_max_concurrent_calls_per_tenant == 0
    assert limits.max_concurrent_calls_per_tenant == {}
    limits = load_settings(
        env={
            "AGENTRT_TOOL_LIMITS__DEFAULT_MAX_CONCURRENT_CALLS_PER_TENANT": "2",
            "AGENTRT_TOOL_LIMITS__MAX_CONCURRENT_CALLS_PER_TENANT": '{"sleep.wait": 1, "noop.echo": 0}',
        }
    ).tool_limits
    assert limits.default_max_concurrent_calls_per_tenant == 2
    assert limits.max_concurrent_calls_per_tenant == {"sleep.wait": 1, "noop.echo": 0}


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("DEFAULT_MAX_CONCURRENT_CALLS_PER_TENANT", "-1", "greater than or equal to 0"),
        ("DEFAULT_MAX_CONCURRENT_CALLS_PER_TENANT", "true", "valid integer"),
        ("DEFAULT_MAX_CONCURRENT_CALLS_PER_TENANT", "1.5", "valid integer"),
        ("DEFAULT_MAX_CONCURRENT_CALLS_PER_TENANT", "lots", "valid integer"),
        ("MAX_CONCURRENT_CALLS_PER_TENANT", '{"sleep.wait": -3}', "greater than or equal to 0"),
        ("MAX_CONCURRENT_CALLS_PER_TENANT", '{"sleep.wait": "2"}', "valid integer"),
        ("MAX_CONCURRENT_CALLS_PER_TENANT", "[1]", "valid dictionary"),
    ],
)
def test_bad_per_tenant_caps_are_a_config_error_naming_the_key(key: str, value: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={f"AGENTRT_TOOL_LIMITS__{key}": value})
    message = str(caught.value)
    assert f"tool_limits.{key.lower()}" in message and says in message
