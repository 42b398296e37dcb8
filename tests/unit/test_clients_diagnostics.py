"""``agentrt diagnose``'s renderings: every part of RunDiagnostics that is set shows, readably."""

from __future__ import annotations

import json

import pytest
from google.protobuf import timestamp_pb2

from agentrt.client import cli, diagnostics_to_json, format_diagnostics
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.proto.runtime.v1 import runtime_service_pb2 as rs

NOW_S = 1_800_000_000.0


def at(offset_s: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromMilliseconds(round((NOW_S + offset_s) * 1000))
    return stamp


def test_a_parked_unknown_outcome_shows_the_next_reconcile_and_the_calls() -> None:
    d = rs.RunDiagnostics(
        run_id="r1",
        phase=run_pb2.RUN_PHASE_UNKNOWN_OUTCOME,
        revision=7,
        last_seq=12,
        fencing_generation=4,
        fault_count=1,
        max_faults=3,
        wake_time=at(2.5),
        last_error=rs.RunError(
            event_type="tool.outcome.unknown",
            seq=11,
            time=at(-10),
            message="transport\nlost",
            call_id="c2",
            tool="refund.issue",
            step=2,
        ),
        reconcile=rs.ReconcileSchedule(
            call_id="c2", next_attempt_time=at(2.5), attempts=3, unknown_since=at(-10)
        ),
        pending_calls=[
            rs.PendingCall(
                call_id="c2",
                tool="refund.issue",
                step=2,
                state=rs.PENDING_CALL_STATE_OUTCOME_UNKNOWN,
                attempts=1,
                remote_operation_id="key-2",
                call_deadline=at(-5),
                unknown_since=at(-10),
            ),
            rs.PendingCall(
                call_id="c3",
                tool="orders.lookup",
                step=2,
                state=rs.PENDING_CALL_STATE_RETRY_SCHEDULED,
                attempts=2,
                next_attempt=3,
                next_retry_time=at(1),
            ),
        ],
        needs_attention=True,
        attention_reason="unknown_outcome_past_deadline",
        trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
        waiting=run_pb2.RunWaiting(
            reason=run_pb2.WAIT_REASON_UNKNOWN_OUTCOME, phase=run_pb2.RUN_PHASE_UNKNOWN_OUTCOME, detail="c2"
        ),
    )
    text = format_diagnostics(d, now_s=NOW_S)
    lines = text.splitlines()
    assert lines[0] == "run r1  UNKNOWN_OUTCOME  revision=7  last_seq=12"
    assert lines[1] == "  waits for: UNKNOWN_OUTCOME c2"
    assert "no replica holds it; wakes" in lines[2] and "(in 2.5s)" in lines[2] and "generation=4" in lines[2]
    assert "faults:    1 of 3" in text
    assert "last error: tool.outcome.unknown #11" in text and "transport lost" in text  # one line
    assert "reconcile: call=c2  next " in text and "attempts=3" in text and "(10.0s ago)" in text
    assert "attention: NEEDS_ATTENTION unknown_outcome_past_deadline" in text
    assert "trace:     4bf92f3577b34da6a3ce929d0e0e4736" in text
    c2 = next(line for line in lines if line.strip().startswith("c2"))
    assert "OUTCOME_UNKNOWN  attempts=1  operation=key-2" in c2 and "call_deadline=" in c2
    c3 = next(line for line in lines if line.strip().startswith("c3"))
    assert "RETRY_SCHEDULED  attempts=2  next attempt 3" in c3 and "(in 1.0s)" in c3


def test_an_owned_run_shows_its_owner_and_expiry_and_the_rest_when_set() -> None:
    d = rs.RunDiagnostics(
        run_id="r2",
        phase=run_pb2.RUN_PHASE_UNKNOWN_OUTCOME,
        lease_owner="replica-a",
        lease_expire_time=at(0.7),
        fencing_generation=9,
        reconcile=rs.ReconcileSchedule(call_id="c1", attempts=0),
        cancel_request_time=at(-1),
        cleanup_status=run_pb2.CLEANUP_STATUS_UNKNOWN,
        cleanups_unknown=1,
        cleanup_retries=2,
        cleanup_due_time=at(30),
        log_note="the run's log cannot be folded by this runtime (ValueError)",
    )
    text = format_diagnostics(d, now_s=NOW_S)
    assert "owner=replica-a  expires=" in text and "(in 0.7s)" in text and "generation=9" in text
    assert "next: query in progress on replica-a" in text
    assert "cancel:    requested" in text and "(1.0s ago)" in text
    assert "cleanup:   UNKNOWN  unknown=1  retries=2  due" in text
    assert "note:      the run's log cannot be folded" in text
    assert "last error: none" in text and "pending calls: none" in text and "trace:     -" in text
    assert "waits for" not in text  # nothing outside the run: it goes on by itself


def test_a_newer_servers_enum_values_still_render() -> None:
    d = rs.RunDiagnostics(
        run_id="r3",
        phase=99,  # type: ignore[arg-type]
        pending_calls=[rs.PendingCall(call_id="c", tool="t", state=42)],  # type: ignore[arg-type]
        cleanup_status=7,  # type: ignore[arg-type]
    )
    text = format_diagnostics(d, now_s=NOW_S)
    assert "run r3  99" in text and "  42  " in text and "cleanup:   7" in text


def test_json_is_one_line_with_proto_field_names() -> None:
    d = rs.RunDiagnostics(
        run_id="r1", lease_owner="replica-a", reconcile=rs.ReconcileSchedule(call_id="c", attempts=2)
    )
    line = diagnostics_to_json(d)
    assert "\n" not in line
    data = json.loads(line)
    assert data["lease_owner"] == "replica-a" and data["reconcile"] == {"call_id": "c", "attempts": 2}


def test_a_lease_past_its_expiry_says_it_lapsed() -> None:
    d = rs.RunDiagnostics(run_id="r4", lease_owner="replica-b", lease_expire_time=at(-4))
    text = format_diagnostics(d, now_s=NOW_S)
    assert "owner=replica-b" in text and "(4.0s ago)" in text and "LAPSED" in text
    fresh = rs.RunDiagnostics(run_id="r4", lease_owner="replica-b", lease_expire_time=at(4))
    assert "LAPSED" not in format_diagnostics(fresh, now_s=NOW_S)


def test_diagnose_without_a_run_id_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["diagnose"]) == 2
    assert "RUN_ID" in capsys.readouterr().err
    assert cli.main(["diagnose", "--help"]) == 0
    assert "operator or admin" in " ".join(capsys.readouterr().out.split())
