"""The cleanup tail on streams, against a real store and bus: what the cleanup job appends after
``run.ended`` reaches every follower and later reader exactly once, and a stream that ends before
the tail is closed says so with ``run.waiting`` WAIT_REASON_CLEANUP.

The writer commits like the engine and the cleanup job: the run's end with its cleanup status
UNKNOWN, then the job's records (status still UNKNOWN), then ``cleanup.settled`` with the status
DONE in one commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import pytest

from agentrt.server.events import EventBus
from agentrt.server.store import Store, StoredEvent
from tests.integration.test_stream_follower import Writer, collect, follower, new_run

OPEN = {"cleanup_status": "UNKNOWN", "cleanups_unknown": 1}
ENDED_PHASE = "COMPLETED"


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(db_url)
    try:
        yield opened
    finally:
        await opened.close()


async def ended_with_open_tail(store: Store, bus: EventBus, run_id: str) -> Writer:
    """A run that ended (seq 4) leaving one cleanup UNKNOWN."""
    await new_run(store, run_id)
    writer = Writer(store, bus, run_id)
    await writer.commit("step.started", cleanup_status="PENDING")
    await writer.commit("run.completed", "run.ended", phase=ENDED_PHASE, **OPEN)
    return writer


async def retry_failed(writer: Writer) -> None:
    """A pass of the cleanup job that failed again: records appended, the tail stays open."""
    await writer.commit("cleanup.started", phase=ENDED_PHASE, **OPEN)
    await writer.commit("cleanup.failed", phase=ENDED_PHASE, **OPEN)


async def released(writer: Writer) -> None:
    """A pass that released it: the last commit closes the tail and makes the status DONE."""
    await writer.commit("cleanup.started", phase=ENDED_PHASE, **OPEN)
    await writer.commit("cleanup.completed", phase=ENDED_PHASE, **OPEN)
    await writer.commit("cleanup.settled", phase=ENDED_PHASE, cleanup_status="DONE", cleanups_unknown=0)


def shape(items: list[StoredEvent]) -> list[tuple[int, str]]:
    return [(e.seq, e.type) for e in items]


def tail_mark(item: StoredEvent) -> dict[str, str]:
    assert (item.seq, item.type) == (0, "run.waiting")
    mark: dict[str, str] = json.loads(item.payload)
    return mark


class Reader:
    """A follower read item by item in the background, so a test can wait for a given item."""

    def __init__(self, store: Store, bus: EventBus, run_id: str, **kwargs: object):
        self.items: list[StoredEvent] = []
        self._arrived = asyncio.Event()
        self._follower = follower(store, bus, run_id, **kwargs)  # subscribes now
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> list[StoredEvent]:
        async for item in self._follower.events():
            self.items.append(item)
            self._arrived.set()
        return self.items

    async def until(self, event_type: str) -> None:
        async with asyncio.timeout(5):
            while not any(e.type == event_type for e in self.items):
                self._arrived.clear()
                await self._arrived.wait()


async def test_a_follower_reads_through_the_tail_until_it_settles(store: Store) -> None:
    bus = EventBus()
    await new_run(store, "tail")
    writer = Writer(store, bus, "tail")
    reader = Reader(store, bus, "tail")  # there from the start, like RunAgent's caller
    await writer.commit("step.started", cleanup_status="PENDING")
    await writer.commit("run.completed", "run.ended", phase=ENDED_PHASE, **OPEN)
    await reader.until("run.waiting")
    assert not reader.task.done()  # the tail is open: a follow stream goes on
    await retry_failed(writer)  # the job's first pass: still unknown
    await reader.until("cleanup.failed")
    assert not reader.task.done()
    await released(writer)
    got = await asyncio.wait_for(reader.task, 5)
    assert shape(got) == [
        (1, "run.started"),
        (2, "step.started"),
        (3, "run.completed"),
        (4, "run.ended"),
        (0, "run.waiting"),  # the mark, once, right where the tail begins
        (5, "cleanup.started"),
        (6, "cleanup.failed"),
        (7, "cleanup.started"),
        (8, "cleanup.completed"),
        (9, "cleanup.settled"),
    ]
    assert tail_mark(got[4]) == {
        "reason": "WAIT_REASON_CLEANUP",
        "phase": "RUN_PHASE_COMPLETED",
        "detail": "1",
    }
    assert bus.subscriber_count("tail") == 0


async def test_run_agent_and_a_replay_end_with_the_mark_while_the_tail_is_open(store: Store) -> None:
    bus = EventBus()
    await new_run(store, "agent")
    writer = Writer(store, bus, "agent")
    agent = Reader(store, bus, "agent", stop_at_wait=True)
    await writer.commit("step.started", cleanup_status="PENDING")
    await writer.commit("run.completed", "run.ended", phase=ENDED_PHASE, **OPEN)
    got = await asyncio.wait_for(agent.task, 5)  # the answer does not wait for the cleanup job
    assert shape(got)[-2:] == [(4, "run.ended"), (0, "run.waiting")]
    assert tail_mark(got[-1])["reason"] == "WAIT_REASON_CLEANUP"

    await retry_failed(writer)
    # Attached later: what is stored of the tail, then the mark (the tail is still open).
    for kwargs in ({"stop_at_wait": True}, {"follow": False}):
        got = await asyncio.wait_for(collect(follower(store, bus, "agent", **kwargs)), 5)
        assert [e.seq for e in got] == [1, 2, 3, 4, 5, 6, 0], kwargs
        assert tail_mark(got[-1])["detail"] == "1"
    assert bus.subscriber_count("agent") == 0


@pytest.mark.parametrize("follow", [True, False])
async def test_readers_attaching_after_the_end_get_the_tail_exactly_once(store: Store, follow: bool) -> None:
    bus = EventBus()
    writer = await ended_with_open_tail(store, bus, "late")
    await retry_failed(writer)  # seq 5, 6
    for after in (0, 3, 4, 5, 6, 1000):  # before, at and inside the tail, and past everything
        if follow:
            reader = Reader(store, bus, "late", after_seq=after)
            await reader.until("run.waiting")
            assert not reader.task.done()  # caught up with an open tail: it follows on
            reader.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader.task
            got = reader.items
        else:
            got = await asyncio.wait_for(
                collect(follower(store, bus, "late", after_seq=after, follow=False)), 5
            )
        assert [e.seq for e in got] == [*range(after + 1, 7), 0], (after, shape(got))
    await released(writer)  # seq 7, 8, 9: the tail is closed
    for after in (0, 4, 6, 8, 9, 1000):
        got = await asyncio.wait_for(collect(follower(store, bus, "late", after_seq=after, follow=follow)), 5)
        assert [e.seq for e in got] == list(range(after + 1, 10)), (after, shape(got))  # no mark: complete
    assert bus.subscriber_count("late") == 0


async def test_the_tail_committed_around_the_switch_from_replay_to_live_is_seen_once(store: Store) -> None:
    bus = EventBus()
    for k in range(24):  # the job commits after k turns of the loop: every interleaving we can reach
        run_id = f"tail{k:03d}"
        writer = await ended_with_open_tail(store, bus, run_id)
        after = (0, 3, 4)[k % 3]

        async def job(writer: Writer = writer, k: int = k) -> None:
            for _ in range(k):
                await asyncio.sleep(0)
            await retry_failed(writer)
            await released(writer)

        got, _ = await asyncio.wait_for(
            asyncio.gather(collect(follower(store, bus, run_id, after_seq=after)), job()), 10
        )
        seqs = [e.seq for e in got if e.seq]
        assert seqs == list(range(after + 1, 10)), (k, shape(got))
        assert got[-1].type == "cleanup.settled"
        marks = [e for e in got if e.type == "run.waiting"]
        # The mark only while the follower saw the tail open, and only where the tail begins.
        assert len(marks) <= 1, (k, shape(got))
        if marks:
            assert got[got.index(marks[0]) - 1].seq >= 4
        assert bus.subscriber_count(run_id) == 0
