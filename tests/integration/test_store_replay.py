"""Replay pages of the store, SQLite and PostgreSQL: row and page together, bounded in rows and bytes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from agentrt.server.store import Store
from tests.integration.test_store import run_values


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(db_url)
    try:
        yield opened
    finally:
        await opened.close()


def padded(size: int) -> str:
    return json.dumps({"pad": "x" * (size - 11)})  # ``size`` characters of JSON


async def logged(store: Store, run_id: str, sizes: list[int]) -> None:
    """A run whose log holds one event per size (seq 1.. in order)."""
    events = [("tool.completed", padded(size)) for size in sizes]
    await store.create_run(run_values(run_id), events, 1)


async def test_a_page_is_cut_by_rows_and_by_stored_bytes_and_says_whether_more_follow(store: Store) -> None:
    await logged(store, "r", [100, 100, 100, 500, 100])
    page = await store.read_page("r", after_seq=0, max_rows=10, max_bytes=300)
    assert [e.seq for e in page.events] == [1, 2, 3] and page.more
    assert [e.payload for e in page.events] == [padded(100)] * 3
    page = await store.read_page("r", after_seq=3, max_rows=10, max_bytes=300)
    assert [e.seq for e in page.events] == [4] and page.more  # past the budget alone: still one page
    page = await store.read_page("r", after_seq=4, max_rows=10, max_bytes=300)
    assert [e.seq for e in page.events] == [5] and not page.more
    page = await store.read_page("r", after_seq=0, max_rows=2, max_bytes=10_000)
    assert [e.seq for e in page.events] == [1, 2] and page.more  # the row limit cut it
    page = await store.read_page("r", after_seq=5, max_rows=2, max_bytes=10_000)
    assert page.events == [] and not page.more
    assert (await store.read_page("nope", after_seq=0, max_rows=2, max_bytes=100)).events == []


async def test_the_row_and_its_first_page_come_together_and_a_missing_run_reads_nothing(store: Store) -> None:
    await logged(store, "r", [50, 50, 50])
    record, page = await store.read_run_and_page("r", after_seq=1, max_rows=10, max_bytes=1000)
    assert record is not None and record.run_id == "r" and record.last_seq == 3
    assert record == await store.get_run("r")
    assert [e.seq for e in page.events] == [2, 3] and not page.more
    record, page = await store.read_run_and_page("nope", after_seq=0, max_rows=10, max_bytes=1000)
    assert record is None and page.events == [] and not page.more
