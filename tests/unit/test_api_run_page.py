"""A ListRuns page is filled within the reply limit (api/_page_tokens.py RunPage)."""

from __future__ import annotations

import dataclasses
import json

from agentrt.proto.runtime.v1 import runtime_service_pb2
from agentrt.server.api._convert import run_to_proto
from agentrt.server.api._page_tokens import MAX_REPLY_BYTES, RunPage
from agentrt.server.api._server import MAX_MESSAGE_BYTES
from agentrt.server.store import RunRecord
from tests.unit.test_events_bus import BASE


def record(i: int, *, metadata_bytes: int = 0) -> RunRecord:
    metadata = {f"k{n}": "x" * 490 for n in range(metadata_bytes // 500)}
    return dataclasses.replace(BASE, run_id=f"r{i:04d}", metadata=json.dumps(metadata), created_ms=i)


def test_the_reply_limit_is_the_servers_send_limit() -> None:
    assert MAX_REPLY_BYTES == MAX_MESSAGE_BYTES


def test_runs_are_added_while_they_fit_and_the_count_is_the_replys_own_size() -> None:
    page = RunPage(convert=run_to_proto, max_bytes=100_000)
    added = [page.add(record(i, metadata_bytes=16_000)) for i in range(10)]
    # About 16 KB a run: six fit in 100,000 bytes, and once one does not, none after it is asked.
    assert added == [True] * 6 + [False] * 4
    reply = runtime_service_pb2.ListRunsResponse(runs=page.runs)
    assert reply.ByteSize() == page.size <= 100_000
    assert [run.run_id for run in page.runs] == [f"r{i:04d}" for i in range(6)]


def test_the_first_run_is_always_taken_so_a_listing_moves_on() -> None:
    page = RunPage(convert=run_to_proto, max_bytes=1_000)
    assert page.add(record(1, metadata_bytes=16_000))
    assert not page.add(record(2))
    assert len(page.runs) == 1


def test_the_default_budget_leaves_room_for_the_next_page_token() -> None:
    page = RunPage(convert=run_to_proto)
    while page.add(record(len(page.runs), metadata_bytes=16_000)):
        pass
    reply = runtime_service_pb2.ListRunsResponse(runs=page.runs, next_page_token="t" * 1024)
    assert MAX_REPLY_BYTES - 20_000 < reply.ByteSize() <= MAX_REPLY_BYTES
