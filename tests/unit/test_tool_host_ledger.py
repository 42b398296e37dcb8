"""Unit tests of the operation ledger (R5.4) and fencing (R3.3), on a real SQLite file and a real
PostgreSQL schema (the shared ledger of a host pool): both backends keep the same semantics."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentrt.toolhost._errors import ErrorCode
from agentrt.toolhost._ledger import (
    Conflict,
    Fenced,
    InFlight,
    Ledger,
    OperationStatus,
    OutcomeUnknown,
    Replay,
    Start,
)
from agentrt.toolhost._ledger_backend import LedgerBackend
from agentrt.toolhost._outcome import Outcome
from tests.unit._ledgers import BACKENDS, OpenLedger, ledger_factory


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "sub" / "ledger.sqlite"


@pytest.fixture(params=BACKENDS)
def open_ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenLedger]:
    yield from ledger_factory(request, tmp_path)


@pytest.fixture
def ledger(open_ledger: OpenLedger) -> LedgerBackend:
    return open_ledger("life-1")


@pytest.fixture
def sqlite_ledger(path: Path) -> Iterator[Ledger]:
    with Ledger(path, owner="life-1") as ledger:
        yield ledger


def _begin(ledger: LedgerBackend, key: str = "k1", **overrides: Any) -> Any:
    kwargs: dict[str, Any] = {
        "idempotency_key": key,
        "tool": "refund.issue",
        "input_hash": "h1",
        "run_id": "run-1",
        "call_id": "call-1",
        "rerun_after_crash": False,
    }
    kwargs.update(overrides)
    return ledger.begin(**kwargs)


def test_a_new_key_starts_and_is_recorded_running(ledger: LedgerBackend) -> None:
    decision = _begin(ledger)
    assert isinstance(decision, Start)
    record = decision.record
    assert (record.status, record.owner, record.executions, record.outcome) == (
        OperationStatus.RUNNING,
        "life-1",
        1,
        None,
    )
    assert (record.tool, record.input_hash, record.run_id, record.call_id) == (
        "refund.issue",
        "h1",
        "run-1",
        "call-1",
    )
    assert record.create_time_ns == record.update_time_ns > 0
    assert ledger.get("k1") == record


def test_the_database_is_in_wal_mode(sqlite_ledger: Ledger, path: Path) -> None:
    assert path.exists()
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        db.close()


def test_unknown_keys_are_none(ledger: LedgerBackend) -> None:
    assert ledger.get("nope") is None


def test_a_succeeded_key_replays(ledger: LedgerBackend) -> None:
    _begin(ledger)
    ledger.finish("k1", Outcome.success('{"ok":true}'))
    decision = _begin(ledger)
    assert isinstance(decision, Replay)
    assert decision.record.status is OperationStatus.SUCCEEDED
    assert decision.record.outcome == Outcome.success('{"ok":true}')
    assert decision.record.executions == 1
    assert decision.record.update_time_ns >= decision.record.create_time_ns


@pytest.mark.parametrize("code", [ErrorCode.PERMANENT, ErrorCode.INVALID_INPUT])
def test_a_final_failure_replays(ledger: LedgerBackend, code: ErrorCode) -> None:
    _begin(ledger)
    ledger.finish("k1", Outcome.error(code, "nope", {"why": 1}))
    decision = _begin(ledger)
    assert isinstance(decision, Replay)
    assert decision.record.status is OperationStatus.FAILED
    failure = decision.record.outcome.failure
    assert (failure.code, failure.message, failure.details_json) == (code, "nope", '{"why": 1}')


# UNAUTHORIZED did nothing: a run paused for a person sends the same call once it is fixed.
@pytest.mark.parametrize("code", [ErrorCode.TRANSIENT, ErrorCode.CANCELLED, ErrorCode.UNAUTHORIZED])
def test_a_retryable_failure_runs_again(ledger: LedgerBackend, code: ErrorCode) -> None:
    _begin(ledger)
    ledger.finish("k1", Outcome.error(code, "later"))
    decision = _begin(ledger, run_id="run-1", call_id="call-2")
    assert isinstance(decision, Start)
    assert (decision.record.status, decision.record.executions) == (OperationStatus.RUNNING, 2)
    assert decision.record.outcome is None
    assert decision.record.call_id == "call-2"


@pytest.mark.parametrize("change", [{"input_hash": "other"}, {"tool": "other.tool"}])
def test_a_key_reused_for_other_arguments_or_tool_conflicts(
    ledger: LedgerBackend, change: dict[str, str]
) -> None:
    _begin(ledger)
    ledger.finish("k1", Outcome.success("1"))
    decision = _begin(ledger, **change)
    assert isinstance(decision, Conflict)
    assert decision.record.input_hash == "h1"


def test_a_conflict_is_reported_even_while_running(ledger: LedgerBackend) -> None:
    _begin(ledger)
    assert isinstance(_begin(ledger, input_hash="other"), Conflict)


def test_running_in_this_life_is_in_flight(ledger: LedgerBackend) -> None:
    _begin(ledger)
    assert isinstance(_begin(ledger), InFlight)


def test_running_in_a_dead_life_is_unknown_for_writes(open_ledger: OpenLedger) -> None:
    with open_ledger("dead") as before_crash:
        _begin(before_crash)
    with open_ledger("life-2") as after:
        decision = _begin(after, rerun_after_crash=False)
        assert isinstance(decision, OutcomeUnknown)
        assert decision.record.owner == "dead"
        assert after.get("k1").status is OperationStatus.RUNNING  # unchanged: still unknown


def test_running_in_a_dead_life_reruns_for_safe_tools(open_ledger: OpenLedger) -> None:
    with open_ledger("dead") as before_crash:
        _begin(before_crash)
    with open_ledger("life-2") as after:
        decision = _begin(after, rerun_after_crash=True)
        assert isinstance(decision, Start)
        assert (decision.record.owner, decision.record.executions) == ("life-2", 2)


def test_only_the_owner_records_an_outcome(open_ledger: OpenLedger) -> None:
    with open_ledger("dead") as before_crash:
        _begin(before_crash)
    with open_ledger("life-2") as after:
        after.finish("k1", Outcome.success("1"))  # a stray finish from another life
        assert after.get("k1").status is OperationStatus.RUNNING


def test_entries_survive_a_reopen(open_ledger: OpenLedger) -> None:
    with open_ledger("a") as first:
        _begin(first)
        first.finish("k1", Outcome.success("[1]"))
    with open_ledger("b") as second:
        record = second.get("k1")
        assert record is not None and record.outcome == Outcome.success("[1]")


def test_close_is_idempotent(path: Path) -> None:
    ledger = Ledger(path, owner="x")
    ledger.close()
    ledger.close()
    assert ledger.closed
    with pytest.raises(sqlite3.ProgrammingError):
        ledger.get("k1")


def test_a_failed_transaction_rolls_back(sqlite_ledger: Ledger) -> None:
    ledger = sqlite_ledger
    _begin(ledger)
    with pytest.raises(sqlite3.IntegrityError), ledger._transaction() as db:
        db.execute("UPDATE operations SET status = 'BOGUS'")  # violates the CHECK
    assert ledger.get("k1").status is OperationStatus.RUNNING
    assert isinstance(_begin(ledger, "k2"), Start)  # the connection is usable again


# --- fencing ---------------------------------------------------------------------------------


def test_fencing_refuses_older_tokens_per_run(ledger: LedgerBackend) -> None:
    assert ledger.check_fence("run-1", 5) is None
    assert ledger.check_fence("run-1", 5) is None  # the same lease again is fine
    assert ledger.check_fence("run-1", 4) == 5
    assert ledger.check_fence("run-2", 1) is None  # other runs are independent
    assert ledger.check_fence("run-1", 9) is None
    assert ledger.check_fence("run-1", 5) == 9


def test_fencing_survives_a_reopen(open_ledger: OpenLedger) -> None:
    with open_ledger("a") as first:
        first.check_fence("run-1", 3)
    with open_ledger("b") as second:
        assert second.check_fence("run-1", 2) == 3


def test_begin_checks_and_remembers_the_fencing_token(ledger: LedgerBackend) -> None:
    assert isinstance(_begin(ledger, "k1", fencing_token=5), Start)
    assert ledger.check_fence("run-1", 4) == 5  # begin remembered 5
    assert _begin(ledger, "k2", fencing_token=4) == Fenced(5)
    assert ledger.get("k2") is None  # nothing recorded for a fenced call
    assert isinstance(_begin(ledger, "k3", fencing_token=5), Start)  # the same lease again
    assert isinstance(_begin(ledger, "k4", fencing_token=6), Start)  # a newer lease
    assert ledger.check_fence("run-1", 5) == 6
    assert isinstance(_begin(ledger, "k5", run_id="run-2", fencing_token=1), Start)  # runs are independent


def test_the_fence_is_checked_before_the_key(ledger: LedgerBackend) -> None:
    _begin(ledger, "k1", fencing_token=5)
    ledger.finish("k1", Outcome.success("1"))
    assert isinstance(_begin(ledger, "k1", fencing_token=5), Replay)
    assert ledger.check_fence("run-1", 6) is None
    assert _begin(ledger, "k1", fencing_token=5) == Fenced(6)  # not a replay
    assert _begin(ledger, "k1", input_hash="other", fencing_token=5) == Fenced(6)  # not a conflict


def test_a_token_is_ignored_without_a_run(ledger: LedgerBackend) -> None:
    assert isinstance(_begin(ledger, "k1", run_id="", fencing_token=3), Start)
    assert isinstance(_begin(ledger, "k2", run_id="", fencing_token=1), Start)
    assert ledger.check_fence("", 1) is None


def test_begin_sees_a_token_another_process_raised(open_ledger: OpenLedger) -> None:
    with open_ledger("a") as first, open_ledger("b") as second:
        assert isinstance(_begin(first, "k1", fencing_token=1), Start)
        assert isinstance(_begin(first, "k2", fencing_token=1), Start)  # 1 is known to `first` now
        assert second.check_fence("run-1", 2) is None
        assert _begin(first, "k3", fencing_token=1) == Fenced(2)
        assert first.get("k3") is None
