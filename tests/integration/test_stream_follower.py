"""Stream followers against a real store and bus: endings, races at the replay/live switch, stalls.

The writer side here does what the engine does after each commit (append, then publish);
the follower is the one the servicer builds for StreamRunEvents and RunAgent.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentrt.server.api._stream_writer import FollowerStalled, send_events
from agentrt.server.api._streams import Follower
from agentrt.server.config import StreamsConfig
from agentrt.server.events import EventBus
from agentrt.server.store import EventPage, RunRecord, Store, StoredEvent
from tests.integration.test_store import run_values

CONFIG = StreamsConfig(follower_buffer_events=8, follower_buffer_bytes=64 * 1024, stall_timeout_s=0.3)


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(db_url)
    try:
        yield opened
    finally:
        await opened.close()


class Writer:
    """Commits a run's events like the engine: append, then publish what was committed."""

    def __init__(self, store: Store, bus: EventBus, run_id: str):
        self.store, self.bus, self.run_id = store, bus, run_id
        self.revision, self.seq = 1, 1

    async def commit(self, *types: str, phase: str = "MODEL_STEP", size: int = 10, **values: Any) -> None:
        payloads = [(t, json.dumps({"pad": "x" * size})) for t in types]
        first = self.seq + 1
        self.revision = await self.store.append(
            self.run_id,
            expected_revision=self.revision,
            owner="w1",
            first_seq=first,
            new_events=payloads,
            values={"phase": phase, **values},
            now_ms=1000,
        )
        self.seq += len(payloads)
        self.bus.publish(
            self.run_id,
            [StoredEvent(self.run_id, first + i, t, p, 1000) for i, (t, p) in enumerate(payloads)],
        )

    def delta(self, text: str) -> None:
        payload = json.dumps({"step": 1, "attempt": 1, "text": text})
        self.bus.publish(
            self.run_id, [StoredEvent(self.run_id, 0, "model.text.delta", payload, 1000)], after_seq=self.seq
        )

    async def end(self) -> None:
        await self.commit("run.completed", "run.ended", phase="COMPLETED")


def follower(store: Store, bus: EventBus, run_id: str, **kwargs: Any) -> Follower:
    options: dict[str, Any] = dict(after_seq=0, follow=True, config=CONFIG, now_ms=lambda: 1000)
    options.update(kwargs)
    # A long idle re-check: these tests pass only if the live path itself misses nothing.
    return Follower(store=store, bus=bus, run_id=run_id, idle_recheck_s=30.0, **options)


async def collect(f: Follower) -> list[StoredEvent]:
    return [item async for item in f.events()]


async def new_run(store: Store, run_id: str, **values: Any) -> None:
    await store.create_run(run_values(run_id, **values), [("run.started", "{}")], 1000)


async def test_a_run_ending_around_the_switch_from_replay_to_live_is_seen_once_and_ends(store: Store) -> None:
    bus = EventBus()
    delivered = 0
    for k in range(24):  # the writer commits after k turns of the loop: every interleaving we can reach
        run_id = f"race{k:03d}"
        await new_run(store, run_id)
        writer = Writer(store, bus, run_id)
        after = k % 3

        async def write(writer: Writer = writer, k: int = k) -> None:
            for _ in range(k):
                await asyncio.sleep(0)
            await writer.commit("step.started")
            writer.delta("hi")
            await writer.commit("model.completed")
            await writer.end()

        f = follower(store, bus, run_id, after_seq=after)
        got, _ = await asyncio.wait_for(asyncio.gather(collect(f), write()), 10)
        seqs = [e.seq for e in got if e.seq]
        assert seqs == list(range(after + 1, writer.seq + 1)), (k, seqs)
        assert got[-1].type == "run.ended" and bus.subscriber_count(run_id) == 0
        deltas = [i for i, e in enumerate(got) if e.seq == 0]
        # A delta is delivered only right after the event it followed (seq 2), never out of order.
        assert all((got[i - 1].seq if i else after) == 2 for i in deltas), (k, [(e.seq, e.type) for e in got])
        delivered += len(deltas)
    assert delivered  # followers that were there when it was published got it


async def test_a_follow_stream_of_an_ended_run_ends_whatever_after_seq(store: Store) -> None:
    bus = EventBus()
    await new_run(store, "ended")
    writer = Writer(store, bus, "ended")
    await writer.commit("step.started")
    await writer.end()
    for after in (0, 2, 3, 4, 5, 1000):
        got = await asyncio.wait_for(collect(follower(store, bus, "ended", after_seq=after)), 5)
        assert [e.seq for e in got] == list(range(after + 1, 5)), after
    assert bus.subscriber_count("ended") == 0


async def test_run_agent_stops_with_run_waiting_once_caught_up_with_a_wait(store: Store) -> None:
    bus = EventBus()
    await new_run(store, "paused")
    writer = Writer(store, bus, "paused")
    f = follower(store, bus, "paused", stop_at_wait=True)
    task = asyncio.ensure_future(collect(f))
    await writer.commit("step.started")
    await asyncio.sleep(0.05)
    assert not task.done()  # working by itself: the stream goes on
    approval = {"approval_id": "a1", "call_id": "c1", "expire_time": "2030-01-01T00:00:00Z"}
    writer.revision = await store.append(
        "paused",
        expected_revision=writer.revision,
        owner="w1",
        first_seq=3,
        new_events=[("approval.requested", json.dumps(approval))],
        values={"phase": "WAITING_APPROVAL", "pending_approval": json.dumps(approval)},
        now_ms=1000,
    )
    bus.publish("paused", [StoredEvent("paused", 3, "approval.requested", json.dumps(approval), 1000)])
    got = await asyncio.wait_for(task, 5)
    assert [(e.seq, e.type) for e in got] == [
        (1, "run.started"),
        (2, "step.started"),
        (3, "approval.requested"),
        (0, "run.waiting"),
    ]
    assert json.loads(got[-1].payload) == {
        "reason": "WAIT_REASON_APPROVAL",
        "phase": "RUN_PHASE_WAITING_APPROVAL",
        "detail": "a1",
    }


async def test_a_follower_that_stops_taking_items_is_dropped_after_the_stall_timeout(store: Store) -> None:
    bus = EventBus()
    await new_run(store, "stall")
    writer = Writer(store, bus, "stall")
    f = follower(store, bus, "stall")
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    writes = 0

    async def write(item: StoredEvent) -> None:
        nonlocal writes
        writes += 1
        if writes > 1:
            await never  # the client stopped reading: gRPC's write does not complete

    sending = asyncio.ensure_future(send_events(f, write, stall_timeout_s=CONFIG.stall_timeout_s))
    await asyncio.sleep(0.05)
    await writer.commit("step.started")
    await asyncio.sleep(CONFIG.stall_timeout_s + 0.2)
    assert not sending.done()  # one event waiting is not a full buffer
    for _ in range(20):  # the run goes on; the follower's buffer fills and stops growing
        await writer.commit("tool.completed", size=1000)
    assert f.sub is not None and f.sub.paused and f.sub.buffered_events <= CONFIG.follower_buffer_events
    filled = f.sub.paused_since
    assert filled is not None
    with pytest.raises(FollowerStalled) as raised:
        await asyncio.wait_for(sending, 5)
    waited = time.monotonic() - filled
    assert CONFIG.stall_timeout_s - 0.01 <= waited <= CONFIG.stall_timeout_s + 1, waited
    assert raised.value.reason == "FOLLOWER_STALLED" and raised.value.metadata["run_id"] == "stall"
    assert never.cancelled() and bus.subscriber_count("stall") == 0


async def test_a_stream_cancelled_while_a_write_is_pending_ends_cancelled_not_stalled(store: Store) -> None:
    bus = EventBus()
    await new_run(store, "gone")
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    writing = asyncio.Event()

    async def write(item: StoredEvent) -> None:
        writing.set()
        await never  # the client went away mid-write

    sending = asyncio.ensure_future(
        send_events(follower(store, bus, "gone"), write, stall_timeout_s=CONFIG.stall_timeout_s)
    )
    await asyncio.wait_for(writing.wait(), 5)
    sending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sending
    assert never.cancelled() and bus.subscriber_count("gone") == 0


async def test_a_replay_whose_reader_stops_is_dropped_and_a_slow_reader_is_not(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    bus = EventBus()
    await new_run(store, "replay")
    writer = Writer(store, bus, "replay")
    for _ in range(10):
        await writer.commit("tool.completed", size=50_000)
    await writer.end()
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def stuck(item: StoredEvent) -> None:
        await never

    with pytest.raises(FollowerStalled):
        await asyncio.wait_for(
            send_events(
                follower(store, bus, "replay", follow=False), stuck, stall_timeout_s=CONFIG.stall_timeout_s
            ),
            5,
        )
    got: list[int] = []

    async def slow(item: StoredEvent) -> None:
        await asyncio.sleep(CONFIG.stall_timeout_s / 3)  # slow, but every write completes in time
        got.append(item.seq)

    f = follower(store, bus, "replay")
    await asyncio.wait_for(send_events(f, slow, stall_timeout_s=CONFIG.stall_timeout_s), 30)
    assert got == list(range(1, writer.seq + 1))

    # Replay pages are cut to a byte budget from the stored sizes, whatever came before.
    pages: list[int] = []
    read_page, read_run_and_page = store.read_page, store.read_run_and_page

    async def recording(run_id: str, *, after_seq: int, max_rows: int, max_bytes: int) -> EventPage:
        page = await read_page(run_id, after_seq=after_seq, max_rows=max_rows, max_bytes=max_bytes)
        pages.append(len(page.events))
        return page

    async def recording_first(
        run_id: str, *, after_seq: int, max_rows: int, max_bytes: int
    ) -> tuple[RunRecord | None, EventPage]:
        record, page = await read_run_and_page(
            run_id, after_seq=after_seq, max_rows=max_rows, max_bytes=max_bytes
        )
        pages.append(len(page.events))
        return record, page

    monkeypatch.setattr(store, "read_page", recording)
    monkeypatch.setattr(
        store, "read_run_and_page", recording_first
    )  # a replay's first page comes with the row
    got = [item.seq async for item in follower(store, bus, "replay", follow=False).events()]
    assert got == list(range(1, writer.seq + 1))
    # run.started and the first 50 KB event fit one page; then one by one; the small end together.
    assert pages[:3] == [2, 1, 1] and pages[-1] >= 2 and max(pages) <= 3


async def test_a_session_turn_queued_behind_another_waits_and_a_deleted_run_ends(store: Store) -> None:
    bus = EventBus()
    await new_run(store, "turn1", owner=None)
    await store.create_run(
        dict(run_values("turn2", owner=None), session_id="s1"), [("run.started", "{}")], 1001
    )
    await store.create_run(
        dict(run_values("turn0", owner=None), session_id="s1"), [("run.started", "{}")], 999
    )
    got = await asyncio.wait_for(collect(follower(store, bus, "turn2", stop_at_wait=True)), 5)
    assert [e.type for e in got] == ["run.started", "run.waiting"]
    assert json.loads(got[-1].payload)["detail"] == "turn0"
    # Its session's first turn is next to start: waiting for a worker is not a wait outside the run.
    task = asyncio.ensure_future(collect(follower(store, bus, "turn0", stop_at_wait=True)))
    await asyncio.sleep(0.1)
    assert not task.done()
    task.cancel()
    got = await asyncio.wait_for(collect(follower(store, bus, "nope", stop_at_wait=True)), 5)
    assert got == []
