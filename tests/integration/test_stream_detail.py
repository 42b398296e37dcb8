"""Followers against a real store and bus: one conversion per live event, detail levels, idle re-reads.

The writer commits like the engine (append, then publish); the follower is the servicer's.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from agentrt.proto.runtime.v1 import run_pb2
from agentrt.server.api._streams import Detail, Follower
from agentrt.server.core import events as ev
from agentrt.server.events import EventBus
from agentrt.server.store import Store, StoredEvent
from tests.integration.test_stream_follower import Writer, collect, follower, new_run


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(db_url)
    try:
        yield opened
    finally:
        await opened.close()


class CountingConverter:
    """A converter counting what it converts (one instance: its identity keys the cache).

    The writer's payloads are padding, not the events' shapes: the message says seq and type only.
    """

    def __init__(self) -> None:
        self.converted: list[int] = []

    def __call__(self, stored: StoredEvent) -> run_pb2.RunEvent:
        self.converted.append(stored.seq)
        message = run_pb2.RunEvent(run_id=stored.run_id, seq=stored.seq)
        getattr(message, ev.oneof_field(stored.type)).SetInParent()
        return message


async def messages(f: Follower, convert: CountingConverter) -> list[run_pb2.RunEvent]:
    return [m async for m in f.messages(convert)]


async def live_run(store: Store, bus: EventBus, run_id: str) -> Writer:
    await new_run(store, run_id)
    return Writer(store, bus, run_id)


async def on_live_path(*followers: Follower) -> None:
    """Until every follower waits on its subscription (replay done), within a bound."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + 5
    while not all(f.sub is not None and f.sub._waiter is not None for f in followers):
        assert loop.time() < give_up, "a follower never reached the live path"
        await asyncio.sleep(0.005)


_TYPE_OF = {ev.oneof_field(t): t for t in ev.EVENT_TYPES}


def kinds(got: list[run_pb2.RunEvent]) -> list[str]:
    return [_TYPE_OF[m.WhichOneof("event") or ""] for m in got]


async def test_two_followers_of_one_run_share_one_conversion_per_live_event(store: Store) -> None:
    bus = EventBus()
    writer = await live_run(store, bus, "shared")
    convert = CountingConverter()
    # Caught up first (after the stored run.started), so what follows comes live.
    first, second = (follower(store, bus, "shared", after_seq=1) for _ in range(2))
    reading = asyncio.gather(messages(first, convert), messages(second, convert))
    await on_live_path(first, second)
    await writer.commit("step.started")
    writer.delta("hel")
    writer.delta("lo")
    await writer.commit("model.completed")
    await writer.end()
    got_first, got_second = await asyncio.wait_for(reading, 10)
    assert [(m.seq, m.WhichOneof("event")) for m in got_first] == [
        (2, "step_started"),
        (0, "model_text_delta"),
        (0, "model_text_delta"),
        (3, "model_completed"),
        (4, "run_completed"),
        (5, "run_ended"),
    ]
    assert got_first == got_second
    assert all(a is b for a, b in zip(got_first, got_second, strict=True))  # the very same messages
    assert sorted(convert.converted) == [0, 0, 2, 3, 4, 5]  # once per event, not per follower


async def test_a_replayed_page_is_converted_per_follower_as_read(store: Store) -> None:
    bus = EventBus()
    writer = await live_run(store, bus, "replayed")
    await writer.commit("step.started", "model.completed")
    await writer.end()
    convert = CountingConverter()
    got = await asyncio.wait_for(messages(follower(store, bus, "replayed"), convert), 10)
    again = await asyncio.wait_for(messages(follower(store, bus, "replayed"), convert), 10)
    assert [m.seq for m in got] == [m.seq for m in again] == [1, 2, 3, 4, 5]
    assert got == again and convert.converted == [1, 2, 3, 4, 5] * 2


async def commit_a_run(writer: Writer) -> None:
    await writer.commit("step.started")
    writer.delta("hi")
    await writer.commit("model.completed", "run.checkpointed")
    await writer.commit("tool.started", "tool.completed")
    await writer.end()


@pytest.mark.parametrize(
    ("detail", "expected"),
    [
        (
            Detail.ALL,
            [
                "step.started",
                "model.text.delta",
                "model.completed",
                "run.checkpointed",
                "tool.started",
                "tool.completed",
                "run.completed",
                "run.ended",
            ],
        ),
        (
            Detail.MILESTONES,
            ["model.completed", "tool.started", "tool.completed", "run.completed", "run.ended"],
        ),
        (Detail.FINAL, ["run.ended"]),
    ],
)
async def test_a_detail_level_sends_its_items_live_and_in_replay_and_converts_only_those(
    store: Store, detail: Detail, expected: list[str]
) -> None:
    bus = EventBus()
    run_id = f"detail-{detail.value}"
    writer = await live_run(store, bus, run_id)
    convert = CountingConverter()
    live = follower(store, bus, run_id, after_seq=1, detail=detail)
    reading = asyncio.ensure_future(messages(live, convert))
    await on_live_path(live)  # a delta reaches followers on the live path only
    await commit_a_run(writer)
    got = await asyncio.wait_for(reading, 10)
    assert kinds(got) == expected
    assert len(convert.converted) == len(expected)  # left-out items are never converted
    seqs = [m.seq for m in got if m.seq]
    assert seqs == sorted(set(seqs))  # in order, no duplicate; seqs skip what is left out
    replayed = await asyncio.wait_for(collect(follower(store, bus, run_id, after_seq=1, detail=detail)), 10)
    assert [e.type for e in replayed] == [t for t in expected if t != "model.text.delta"]


async def test_final_run_agent_ends_with_run_waiting_only(store: Store) -> None:
    bus = EventBus()
    writer = await live_run(store, bus, "waits")
    approval = {"approval_id": "a1", "call_id": "c1", "expire_time": "2030-01-01T00:00:00Z"}
    await store.append(
        "waits",
        expected_revision=writer.revision,
        owner="w1",
        first_seq=2,
        new_events=[("approval.requested", json.dumps(approval))],
        values={"phase": "WAITING_APPROVAL", "pending_approval": json.dumps(approval)},
        now_ms=1000,
    )
    got = await asyncio.wait_for(
        collect(follower(store, bus, "waits", stop_at_wait=True, detail=Detail.FINAL)), 10
    )
    assert [(e.seq, e.type) for e in got] == [(0, "run.waiting")]
    assert json.loads(got[0].payload)["reason"] == "WAIT_REASON_APPROVAL"
    milestones = await asyncio.wait_for(
        collect(follower(store, bus, "waits", stop_at_wait=True, detail=Detail.MILESTONES)), 10
    )
    assert [e.type for e in milestones] == ["run.started", "approval.requested", "run.waiting"]


async def test_an_idle_wait_sends_the_follower_back_to_the_store(store: Store) -> None:
    bus = EventBus()
    writer = await live_run(store, bus, "quiet")
    f = follower(store, bus, "quiet", after_seq=1)
    f.idle_recheck_s = 0.05  # the only way the events below can reach it
    reading = asyncio.ensure_future(collect(f))
    await on_live_path(f)
    # Committed without a publish here (another replica, no Redis): only the store has it.
    await store.append(
        "quiet",
        expected_revision=writer.revision,
        owner="w1",  # the run's owner, on a replica this bus is not part of
        first_seq=2,
        new_events=[("run.completed", "{}"), ("run.ended", "{}")],
        values={"phase": "COMPLETED"},
        now_ms=1000,
    )
    got = await asyncio.wait_for(reading, 10)
    assert [(e.seq, e.type) for e in got] == [(2, "run.completed"), (3, "run.ended")]
    assert bus.subscriber_count("quiet") == 0


async def test_a_closed_stream_ends_its_wait_and_unsubscribes(store: Store) -> None:
    bus = EventBus()
    await live_run(store, bus, "left")
    f = follower(store, bus, "left", after_seq=1)  # idle re-check of 30 s: only the cancel ends it
    reading = asyncio.ensure_future(collect(f))
    await on_live_path(f)
    assert bus.subscriber_count("left") == 1 and not reading.done()
    reading.cancel()  # the peer went away: gRPC cancels the handler
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(reading, 5)
    assert bus.subscriber_count("left") == 0
