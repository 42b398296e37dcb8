"""The ledger's one write for a read-only idempotent call (``record_read``), on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentrt.toolhost._errors import ErrorCode
from agentrt.toolhost._ledger import OperationStatus, ReadCall, Start
from agentrt.toolhost._ledger_backend import LedgerBackend
from agentrt.toolhost._outcome import Outcome
from tests.unit._ledgers import BACKENDS, OpenLedger, ledger_factory


@pytest.fixture(params=BACKENDS)
def open_ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenLedger]:
    yield from ledger_factory(request, tmp_path)


@pytest.fixture
def ledger(open_ledger: OpenLedger) -> LedgerBackend:
    return open_ledger("me")  # type: ignore[no-any-return]


def _read(key: str = "k1", *, input_hash: str = "h", tool: str = "noop.echo", call: str = "c1") -> ReadCall:
    return ReadCall(
        tenant="",
        idempotency_key=key,
        tool=tool,
        input_hash=input_hash,
        run_id="run-1",
        call_id=call,
        start_time_ns=1,
    )


def test_a_new_read_is_written_once_finished(ledger: LedgerBackend) -> None:
    ledger.record_read(_read(), Outcome.success('{"a":1}'))
    record = ledger.get("k1")
    assert record is not None and record.status is OperationStatus.SUCCEEDED
    assert record.outcome == Outcome.success('{"a":1}')
    assert (record.executions, record.owner, record.create_time_ns) == (1, "me", 1)


def test_a_read_after_a_retryable_failure_replaces_it(ledger: LedgerBackend) -> None:
    ledger.record_read(_read(), Outcome.error(ErrorCode.TRANSIENT, "down"))
    ledger.record_read(_read(call="c2"), Outcome.success("2"))
    record = ledger.get("k1")
    assert record is not None and record.outcome == Outcome.success("2")
    assert (record.executions, record.call_id) == (2, "c2")


def test_a_final_outcome_stays_the_first_one_recorded(ledger: LedgerBackend) -> None:
    # Two hosts of a pool may run one read at once: the first final outcome wins.
    ledger.record_read(_read(), Outcome.success("1"))
    ledger.record_read(_read(call="c2"), Outcome.success("2"))
    ledger.record_read(_read(call="c3"), Outcome.error(ErrorCode.PERMANENT, "no"))
    record = ledger.get("k1")
    assert record is not None and record.outcome == Outcome.success("1") and record.executions == 1


def test_another_calls_entry_under_the_key_is_left_alone(ledger: LedgerBackend) -> None:
    ledger.record_read(_read(input_hash="h1"), Outcome.error(ErrorCode.TRANSIENT, "down"))
    ledger.record_read(_read(input_hash="h2"), Outcome.success("2"))
    ledger.record_read(_read(tool="other.read"), Outcome.success("3"))
    record = ledger.get("k1")
    assert record is not None and (record.tool, record.input_hash) == ("noop.echo", "h1")
    assert record.outcome is not None and record.outcome.failure is not None


def test_a_read_settles_an_entry_an_earlier_host_left_running(open_ledger: OpenLedger) -> None:
    dead = open_ledger("dead-host")
    started = dead.begin(
        idempotency_key="k1", tool="noop.echo", input_hash="h", run_id="run-1", call_id="c0",
        rerun_after_crash=True,
    )  # fmt: skip
    assert isinstance(started, Start)
    me = open_ledger("me")
    me.record_read(_read(), Outcome.success("1"))
    record = me.get("k1")
    assert record is not None and record.status is OperationStatus.SUCCEEDED
    assert (record.owner, record.executions) == ("me", 2)


def test_the_running_record_is_what_get_operation_reports_in_flight() -> None:
    record = _read().running_record(owner="me")
    assert record.status is OperationStatus.RUNNING and record.outcome is None
    assert (record.idempotency_key, record.owner, record.create_time_ns) == ("k1", "me", 1)
