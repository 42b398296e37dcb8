"""The plugin served by a real tool host process, found through its entry point."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from acme_notes import agentrt_query_operation
from agentrt.testing import ToolHostProcess, spawn_tool_host


@pytest.fixture
def host(tmp_path: Path) -> Iterator[ToolHostProcess]:
    with spawn_tool_host(tmp_path / "host", entrypoints=True) as host:
        yield host


def test_a_note_added_is_listed(host: ToolHostProcess) -> None:
    assert host.call_tool("notes.add", {"topic": "trip", "text": "book the train"}).ok
    assert host.call_tool("notes.list", {"topic": "trip"}).result == {
        "topic": "trip",
        "notes": ["book the train"],
    }


def test_a_retried_write_is_answered_from_the_ledger_and_writes_once(host: ToolHostProcess) -> None:
    first = host.call_tool("notes.add", {"topic": "trip", "text": "pack"}, idempotency_key="call-1")
    again = host.call_tool("notes.add", {"topic": "trip", "text": "pack"}, idempotency_key="call-1")
    assert again.replayed and again.result == first.result
    assert host.call_tool("notes.list", {"topic": "trip"}).result["notes"] == ["pack"]


def test_bad_arguments_are_refused_before_the_tool_runs(host: ToolHostProcess) -> None:
    reply = host.call_tool("notes.add", {"topic": "", "text": "no topic"})
    assert reply.error_code == "INVALID_INPUT"
    assert host.call_tool("notes.list", {"topic": "trip"}).result["notes"] == []


def test_the_query_hook_answers_from_the_notes_themselves(host: ToolHostProcess) -> None:
    host.call_tool("notes.add", {"topic": "trip", "text": "tickets"}, idempotency_key="call-2")
    answer = agentrt_query_operation(tool="notes.add", idempotency_key="call-2", data_dir=host.data_dir)
    assert answer == {"status": "succeeded", "result": {"topic": "trip", "added": "tickets"}}
    assert agentrt_query_operation(
        tool="notes.add", idempotency_key="never-sent", data_dir=host.data_dir
    ) == {"status": "absent"}
