"""The pure decision about a call whose key the ledger holds, and the liveness of an entry's owner."""

from __future__ import annotations

import dataclasses

import pytest

from agentrt.toolhost._errors import ErrorCode
from agentrt.toolhost._ledger_types import (
    Busy,
    Conflict,
    InFlight,
    OperationRecord,
    OperationStatus,
    OutcomeUnknown,
    Replay,
)
from agentrt.toolhost._ledger_verdict import Verdict, decision_of, owner_alive, rerun_record, verdict_on
from agentrt.toolhost._outcome import Outcome

RUNNING = OperationRecord(
    tenant="acme",
    idempotency_key="k",
    tool="refund.issue",
    input_hash="h",
    run_id="r",
    call_id="c",
    status=OperationStatus.RUNNING,
    outcome=None,
    owner="host-a",
    executions=1,
    create_time_ns=1,
    update_time_ns=1,
)


def _verdict(record: OperationRecord = RUNNING, **overrides: object) -> Verdict:
    kwargs: dict[str, object] = {
        "tool": "refund.issue",
        "input_hash": "h",
        "me": "host-b",
        "record_owner_alive": False,
        "rerun_after_crash": False,
    }
    kwargs.update(overrides)
    return verdict_on(record, **kwargs)  # type: ignore[arg-type]


def test_other_arguments_or_tool_conflict_whatever_the_status() -> None:
    assert _verdict(input_hash="x") is Verdict.CONFLICT
    assert _verdict(tool="other", me="host-a") is Verdict.CONFLICT


def test_running_here_is_in_flight() -> None:
    assert _verdict(me="host-a") is Verdict.IN_FLIGHT


@pytest.mark.parametrize("safe", [False, True])
def test_running_on_a_live_host_of_the_pool_is_busy_even_for_safe_tools(safe: bool) -> None:
    assert _verdict(record_owner_alive=True, rerun_after_crash=safe) is Verdict.BUSY


def test_running_under_a_dead_owner_is_unknown_for_writes_and_runs_again_for_safe_tools() -> None:
    assert _verdict() is Verdict.OUTCOME_UNKNOWN
    assert _verdict(rerun_after_crash=True) is Verdict.RUN_AGAIN


def test_final_outcomes_replay_and_retryable_ones_run_again() -> None:
    done = dataclasses.replace(RUNNING, status=OperationStatus.SUCCEEDED, outcome=Outcome.success("1"))
    assert _verdict(done, record_owner_alive=True) is Verdict.REPLAY
    final = dataclasses.replace(
        RUNNING, status=OperationStatus.FAILED, outcome=Outcome.error(ErrorCode.PERMANENT, "no")
    )
    assert _verdict(final) is Verdict.REPLAY
    retry = dataclasses.replace(
        RUNNING, status=OperationStatus.FAILED, outcome=Outcome.error(ErrorCode.TRANSIENT, "later")
    )
    assert _verdict(retry) is Verdict.RUN_AGAIN


def test_every_verdict_but_run_again_has_its_decision() -> None:
    expected = {
        Verdict.CONFLICT: Conflict(RUNNING),
        Verdict.IN_FLIGHT: InFlight(RUNNING),
        Verdict.BUSY: Busy(RUNNING),
        Verdict.OUTCOME_UNKNOWN: OutcomeUnknown(RUNNING),
        Verdict.REPLAY: Replay(RUNNING),
        Verdict.RUN_AGAIN: None,
    }
    assert {verdict: decision_of(verdict, RUNNING) for verdict in Verdict} == expected


def test_a_rerun_is_running_again_under_the_new_owner() -> None:
    started = rerun_record(RUNNING, owner="host-b", run_id="r2", call_id="c2", now_ns=9)
    assert (started.record.owner, started.record.executions, started.record.update_time_ns) == (
        "host-b",
        2,
        9,
    )
    assert (started.record.run_id, started.record.call_id, started.record.create_time_ns) == ("r2", "c2", 1)


@pytest.mark.parametrize(
    ("beat_ns", "now_ns", "alive"),
    [(None, 100, False), (100, 100, True), (91, 100, True), (90, 100, False), (50, 100, False)],
)
def test_an_owner_is_alive_while_its_heartbeat_is_younger_than_the_ttl(
    beat_ns: int | None, now_ns: int, alive: bool
) -> None:
    assert owner_alive(beat_ns=beat_ns, now_ns=now_ns, ttl_ns=10) is alive
