"""The event bus's bounded subscriptions, and what a RunAgent stream says a run waits for."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from agentrt.server.api._streams import waiting_for
from agentrt.server.core import Phase
from agentrt.server.events import EventBus, item_bytes
from agentrt.server.store import RunRecord, StoredEvent


def event(seq: int, size: int = 10, kind: str = "step.started") -> StoredEvent:
    return StoredEvent("r1", seq, kind, "x" * size, 0)


def test_a_subscription_pauses_at_its_event_bound_and_drops_until_resumed() -> None:
    bus = EventBus(buffer_events=3, buffer_bytes=1 << 20)
    sub = bus.subscribe("r1")
    bus.publish("r1", [event(i) for i in range(1, 6)])
    assert sub.paused and sub.buffered_events == 3 and sub.dropped == 2
    bus.publish("r1", [event(6)])
    assert sub.buffered_events == 3 and sub.dropped == 3  # nothing more is buffered while paused
    taken = [sub.get_nowait() for _ in range(4)]
    assert [t.event.seq for t in taken if t is not None] == [1, 2, 3] and taken[3] is None
    assert sub.paused  # draining does not resume: the reader refills from the store first
    sub.resume()
    bus.publish("r1", [event(7)])
    item = sub.get_nowait()
    assert item is not None and item.event.seq == 7 and not sub.paused


def test_a_subscription_pauses_at_its_byte_bound() -> None:
    bus = EventBus(buffer_events=1000, buffer_bytes=3 * item_bytes(event(1, 1000)))
    sub = bus.subscribe("r1")
    bus.publish("r1", [event(i, 1000) for i in range(1, 5)])
    assert sub.paused and sub.buffered_events == 3
    assert sub.buffered_bytes == 3 * item_bytes(event(1, 1000))
    while sub.get_nowait() is not None:
        pass
    assert sub.buffered_bytes == 0


def test_one_overfull_subscription_does_not_affect_another_and_payloads_are_shared() -> None:
    bus = EventBus(buffer_events=2, buffer_bytes=1 << 20)
    slow, fast = bus.subscribe("r1"), bus.subscribe("r1", max_events=10)
    items = [event(i) for i in range(1, 5)]
    bus.publish("r1", items)
    assert slow.paused and not fast.paused and fast.buffered_events == 4
    first = fast.get_nowait()
    assert first is not None and first.event is items[0]  # the same object: no copy per subscriber
    bus.publish("other", [event(9)])
    assert fast.buffered_events == 3


def test_live_only_items_carry_their_place_among_persisted_events() -> None:
    bus = EventBus()
    sub = bus.subscribe("r1")
    bus.publish("r1", [event(0, kind="model.text.delta")], after_seq=4)
    bus.publish("r1", [event(5)], after_seq=99)  # ignored for persisted events
    delta, persisted = sub.get_nowait(), sub.get_nowait()
    assert delta is not None and delta.after_seq == 4
    assert persisted is not None and persisted.after_seq is None


async def test_get_waits_for_an_item_times_out_and_returns_at_once_when_paused() -> None:
    bus = EventBus(buffer_events=1, buffer_bytes=1 << 20)
    sub = bus.subscribe("r1")
    assert await sub.get(wait_s=0.01) is None
    waiting = asyncio.ensure_future(sub.get(wait_s=5))
    await asyncio.sleep(0)
    bus.publish("r1", [event(1)])
    got = await asyncio.wait_for(waiting, 1)
    assert got is not None and got.event.seq == 1
    full = sub.full_signal()
    assert not full.done()
    bus.publish("r1", [event(2), event(3)])
    await asyncio.wait_for(full, 1)  # the writer's stall clock starts here
    assert sub.full_signal().done()  # already full: a new signal is complete at once
    assert (await sub.get(wait_s=5)) is not None
    assert await asyncio.wait_for(sub.get(wait_s=5), 0.5) is None  # paused and empty: no wait


def test_unsubscribe_forgets_the_subscription_and_what_it_held() -> None:
    bus = EventBus()
    sub = bus.subscribe("r1")
    bus.publish("r1", [event(1)])
    bus.unsubscribe(sub)
    assert bus.subscriber_count("r1") == 0 and sub.buffered_events == 0 and sub.buffered_bytes == 0
    bus.unsubscribe(sub)  # twice is harmless


def test_drain_drops_what_is_held_and_resumes() -> None:
    bus = EventBus(buffer_events=1)
    sub = bus.subscribe("r1")
    bus.publish("r1", [event(1), event(2)])
    sub.drain()
    assert not sub.paused and sub.buffered_events == 0


BASE = RunRecord(
    run_id="r1",
    tenant_id="t",
    agent_name="a",
    agent_spec="{}",
    input="hi",
    output="",
    reason="",
    phase="MODEL_STEP",
    revision=3,
    last_seq=3,
    budgets="{}",
    usage="{}",
    request_key=None,
    session_id=None,
    metadata="{}",
    created_ms=0,
    updated_ms=0,
    deadline_ms=0,
    lease_owner=None,
    lease_expires_ms=None,
    lease_generation=1,
    cancel_requested_ms=None,
    cancel_reason=None,
    wake_ms=None,
    pending_approval=None,
    state_version=1,
    runtime_version="0",
    agent_config_hash="h",
)


@pytest.mark.parametrize(
    ("changes", "kwargs", "expected"),
    [
        (
            {
                "phase": "WAITING_APPROVAL",
                "pending_approval": json.dumps({"approval_id": "a1", "call_id": "c"}),
            },
            {},
            ("WAIT_REASON_APPROVAL", Phase.WAITING_APPROVAL, "a1"),
        ),
        (
            {
                "phase": "WAITING_APPROVAL",
                "pending_approval": json.dumps({"approval_id": "a2", "call_id": ""}),
            },
            {},
            ("WAIT_REASON_BUDGET", Phase.WAITING_APPROVAL, "a2"),
        ),
        (
            {"phase": "UNKNOWN_OUTCOME"},
            {"unknown_call": "call_2_0"},
            ("WAIT_REASON_UNKNOWN_OUTCOME", Phase.UNKNOWN_OUTCOME, "call_2_0"),
        ),
        (
            {"phase": "QUEUED", "session_id": "s"},
            {"session_head": "r0"},
            ("WAIT_REASON_SESSION_QUEUE", Phase.QUEUED, "r0"),
        ),
        ({"phase": "QUEUED", "session_id": "s"}, {"session_head": "r1"}, None),  # its turn: next to start
        ({"phase": "QUEUED"}, {"session_head": "r0"}, None),  # waiting for capacity is not outside itself
        ({"phase": "RETRY_WAIT"}, {}, None),
        ({"phase": "MODEL_STEP"}, {}, None),
        ({"phase": "CANCEL_REQUESTED"}, {}, None),
        # An ended run waits for nothing but the cleanup job, and only while its tail is open.
        (
            {"phase": "COMPLETED", "cleanup_status": "UNKNOWN", "cleanups_unknown": 2},
            {},
            ("WAIT_REASON_CLEANUP", Phase.COMPLETED, "2"),
        ),
        ({"phase": "CANCELLED", "cleanup_status": "DONE"}, {}, None),
        ({"phase": "FAILED"}, {"unknown_call": "call_2_0"}, None),
    ],
)
def test_waiting_for_names_only_waits_outside_the_run(
    changes: dict[str, str], kwargs: dict[str, str], expected: tuple[str, Phase, str] | None
) -> None:
    waiting = waiting_for(dataclasses.replace(BASE, **changes), **kwargs)
    assert (None if waiting is None else (waiting.reason, waiting.phase, waiting.detail)) == expected
    if waiting is not None:
        stored = waiting.to_stored("r1", 5)
        assert stored.seq == 0 and stored.type == "run.waiting"
        assert json.loads(stored.payload)["phase"] == f"RUN_PHASE_{waiting.phase.value}"


async def test_an_idle_wait_times_out_with_one_timer_and_no_task() -> None:
    bus = EventBus()
    sub = bus.subscribe("r1")
    loop = asyncio.get_running_loop()
    tasks_before = len(asyncio.all_tasks())
    waiting = asyncio.ensure_future(sub.get(wait_s=0.05))
    await asyncio.sleep(0)
    assert len(asyncio.all_tasks()) == tasks_before + 1  # the waiting get itself, no helper task
    assert await asyncio.wait_for(waiting, 5) is None  # idle: the follower goes back to the store
    timers = [h for h in getattr(loop, "_scheduled", []) if not h.cancelled()]
    assert all("_wake" not in repr(h) for h in timers)  # nothing left scheduled by the wait
    bus.publish("r1", [event(1)])
    got = await sub.get(wait_s=0.05)  # buffered: returned without waiting
    assert got is not None and got.event.seq == 1


async def test_an_item_cancels_the_wait_s_timer() -> None:
    bus = EventBus()
    sub = bus.subscribe("r1")
    loop = asyncio.get_running_loop()
    waiting = asyncio.ensure_future(sub.get(wait_s=60))
    await asyncio.sleep(0)
    bus.publish("r1", [event(1)])
    got = await asyncio.wait_for(waiting, 5)
    assert got is not None and got.event.seq == 1
    live = [h for h in getattr(loop, "_scheduled", []) if not h.cancelled() and "_wake" in repr(h)]
    assert live == []


async def test_closing_a_subscription_ends_a_pending_get_without_cancelling_the_reader() -> None:
    bus = EventBus()
    sub = bus.subscribe("r1")
    waiting = asyncio.ensure_future(sub.get(wait_s=60))
    await asyncio.sleep(0)
    bus.unsubscribe(sub)
    assert await asyncio.wait_for(waiting, 5) is None
    assert bus.follower_count() == 0


async def test_a_cancelled_get_leaves_the_subscription_usable() -> None:
    bus = EventBus()
    sub = bus.subscribe("r1")
    waiting = asyncio.ensure_future(sub.get(wait_s=60))
    await asyncio.sleep(0)
    waiting.cancel()  # the stream's peer went away
    with pytest.raises(asyncio.CancelledError):
        await waiting
    again = asyncio.ensure_future(sub.get(wait_s=60))
    await asyncio.sleep(0)
    bus.publish("r1", [event(1)])
    got = await asyncio.wait_for(again, 5)
    assert got is not None and got.event.seq == 1
