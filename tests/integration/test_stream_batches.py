"""Followers hand out batches: what became readable together, in order, bounded, never empty.

A batch is one message of a ``batch_events`` stream; flattened, the batches are exactly what
the follower yields one by one (no gap, no duplicate), whatever the interleaving.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from agentrt.server.api import _streams
from agentrt.server.api._streams import Follower
from agentrt.server.config import StreamsConfig
from agentrt.server.events import EventBus
from agentrt.server.store import Store, StoredEvent
from tests.integration.test_stream_follower import Writer, follower, new_run


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(db_url)
    try:
        yield opened
    finally:
        await opened.close()


async def batches(f: Follower) -> list[list[StoredEvent]]:
    return [batch async for batch in f.message_batches(lambda e: e)]


async def test_batches_flatten_to_the_run_in_order_whatever_the_interleaving(store: Store) -> None:
    bus = EventBus()
    for k in range(18):
        run_id = f"batch{k:03d}"
        await new_run(store, run_id)
        writer = Writer(store, bus, run_id)
        after = k % 3

        async def write(writer: Writer = writer, k: int = k) -> None:
            for _ in range(k):
                await asyncio.sleep(0)
            await writer.commit("step.started", "model.completed")
            writer.delta("hi")
            await writer.commit("tool.started")
            await writer.commit("tool.completed", "step.started")
            await writer.end()

        got, _ = await asyncio.wait_for(
            asyncio.gather(batches(follower(store, bus, run_id, after_seq=after)), write()), 10
        )
        assert all(got), k  # never an empty batch
        seqs = [e.seq for batch in got for e in batch if e.seq]
        assert seqs == list(range(after + 1, writer.seq + 1)), (k, seqs)
        assert got[-1][-1].type == "run.ended" and bus.subscriber_count(run_id) == 0


async def reading(f: Follower, writer: Writer) -> tuple[asyncio.Future[None], list[list[StoredEvent]]]:
    """Start reading ``f``; returns once it has taken a first commit, so it is live from then on."""
    got: list[list[StoredEvent]] = []

    async def read() -> None:
        async for batch in f.message_batches(lambda e: e):
            got.append(batch)

    task = asyncio.ensure_future(read())
    await writer.commit("model.completed")
    for _ in range(500):
        if got:
            return task, got
        await asyncio.sleep(0.01)
    raise AssertionError("the follower never took the first commit")


async def test_a_commit_published_to_a_waiting_reader_arrives_as_one_batch(store: Store) -> None:
    bus = EventBus()
    await new_run(store, "one-commit")
    writer = Writer(store, bus, "one-commit")
    task, got = await reading(follower(store, bus, "one-commit", after_seq=1), writer)
    await writer.commit("step.started", "model.completed", "tool.started")
    await writer.end()
    await asyncio.wait_for(task, 10)
    assert [[e.type for e in batch] for batch in got[1:]] == [
        ["step.started", "model.completed", "tool.started"],
        ["run.completed", "run.ended"],
    ]


async def test_a_replayed_page_is_one_batch(store: Store) -> None:
    bus = EventBus()
    await new_run(store, "replayed")
    writer = Writer(store, bus, "replayed")
    for _ in range(5):
        await writer.commit("step.started", "model.completed")
    await writer.end()
    got = await batches(follower(store, bus, "replayed", follow=False))
    # 13 events in pages of CONFIG.follower_buffer_events (8) rows
    assert [len(batch) for batch in got] == [8, 5]
    assert [e.seq for batch in got for e in batch] == list(range(1, 14))


async def test_a_burst_past_the_batch_bound_is_split_in_order(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_streams, "_MAX_BATCH_ITEMS", 4)
    bus = EventBus()
    await new_run(store, "burst")
    writer = Writer(store, bus, "burst")
    config = StreamsConfig(follower_buffer_events=64, follower_buffer_bytes=1024 * 1024, stall_timeout_s=5)
    task, got = await reading(follower(store, bus, "burst", after_seq=1, config=config), writer)
    await writer.commit(*["step.started"] * 10)
    await writer.end()
    await asyncio.wait_for(task, 10)
    assert [len(batch) for batch in got[1:]] == [4, 4, 2, 2]
    assert [e.seq for batch in got for e in batch] == list(range(2, writer.seq + 1))


async def test_a_batch_is_bounded_in_bytes_too(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_streams, "_MAX_BATCH_BYTES", 3000)
    bus = EventBus()
    await new_run(store, "big")
    writer = Writer(store, bus, "big")
    config = StreamsConfig(follower_buffer_events=64, follower_buffer_bytes=1024 * 1024, stall_timeout_s=5)
    task, got = await reading(follower(store, bus, "big", after_seq=1, config=config), writer)
    await writer.commit(*["tool.completed"] * 6, size=1000)  # ~1.2 kB each as counted
    await writer.end()
    await asyncio.wait_for(task, 10)
    assert [len(batch) for batch in got[1:]] == [3, 3, 2]
    assert [e.seq for batch in got for e in batch] == list(range(2, writer.seq + 1))
