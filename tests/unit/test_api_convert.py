"""Conversions between core/store values and protobuf messages (api/_convert.py)."""

from __future__ import annotations

import json

import pytest

from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2
from agentrt.server.api._convert import (
    approval_decision_from_proto,
    approval_decision_to_proto,
    approval_signal,
    cancel_signal,
    event_to_proto,
    outcome_decision_from_proto,
    outcome_decision_to_proto,
    outcome_signal,
    phase_from_proto,
    phase_to_proto,
)
from agentrt.server.core import (
    ApprovalDecision,
    ApprovalRequested,
    CancelRun,
    GrantBudget,
    OutcomeDecision,
    Phase,
    ResolveApproval,
    ResolveOutcome,
)
from agentrt.server.core import events as ev
from agentrt.server.store import StoredEvent, encode_event


def test_phase_round_trip_is_exhaustive() -> None:
    assert {phase_from_proto(phase_to_proto(p)) for p in Phase} == set(Phase)
    assert len(run_pb2.RunPhase.keys()) == len(Phase) + 1
    with pytest.raises(ValueError, match="UNSPECIFIED"):
        phase_from_proto(run_pb2.RUN_PHASE_UNSPECIFIED)


def test_decision_round_trips_are_exhaustive_both_ways() -> None:
    for value in run_pb2.ApprovalDecision.values():
        assert approval_decision_to_proto(approval_decision_from_proto(value)) == value
    assert {approval_decision_from_proto(approval_decision_to_proto(d)) for d in ApprovalDecision} == set(
        ApprovalDecision
    )
    assert len(run_pb2.ApprovalDecision.values()) == len(ApprovalDecision)
    for value in runtime_service_pb2.OutcomeDecision.values():
        assert outcome_decision_to_proto(outcome_decision_from_proto(value)) == value
    assert {outcome_decision_from_proto(outcome_decision_to_proto(d)) for d in OutcomeDecision} == set(
        OutcomeDecision
    )
    assert len(runtime_service_pb2.OutcomeDecision.values()) == len(OutcomeDecision)
    assert approval_decision_from_proto(run_pb2.APPROVAL_DECISION_REJECT) is ApprovalDecision.REJECT
    assert outcome_decision_from_proto(runtime_service_pb2.OUTCOME_DECISION_RETRY) is OutcomeDecision.RETRY
    with pytest.raises(KeyError):
        approval_decision_from_proto(99)


def test_a_persons_request_becomes_the_signal_it_is() -> None:
    request = runtime_service_pb2.ResolveApprovalRequest(
        run_id="r",
        approval_id="ap1",
        decision=run_pb2.APPROVAL_DECISION_APPROVE,
        args_hash="h",
        comment="x" * 500,
        override_intent=True,
    )
    call = ApprovalRequested(approval_id="ap1", call_id="c1", tool="refund.issue")
    budget = ApprovalRequested(approval_id="ap1", call_id="", tool="budget.tool_calls")
    approval = approval_signal(request, approver="bob", pending=call)
    assert approval == ResolveApproval(
        approval_id="ap1",
        decision=ApprovalDecision.APPROVE,
        args_hash="h",
        approver="bob",
        comment="x" * 400,  # what an event keeps
        override_intent=True,
    )
    assert approval_signal(request, approver="bob", pending=None) == approval  # refused by the core
    assert approval_signal(request, approver="bob", pending=budget) == GrantBudget(
        approval_id="ap1", decision=ApprovalDecision.APPROVE, args_hash="h", approver="bob", comment="x" * 400
    )
    request.decision = run_pb2.APPROVAL_DECISION_REJECT
    rejected = approval_signal(request, approver="bob", pending=call)
    assert (
        isinstance(rejected, ResolveApproval) and not rejected.override_intent
    )  # only an approval overrides
    outcome = runtime_service_pb2.ResolveOutcomeRequest(
        run_id="r", call_id="c1", decision=runtime_service_pb2.OUTCOME_DECISION_SUCCEEDED, result_json="{}"
    )
    assert outcome_signal(outcome, resolved_by="ops") == ResolveOutcome(
        call_id="c1", decision=OutcomeDecision.SUCCEEDED, resolved_by="ops", result_json="{}"
    )
    cancel = runtime_service_pb2.CancelRunRequest(run_id="r", reason="stop")
    assert cancel_signal(cancel, requested_by="alice") == CancelRun(reason="stop", requested_by="alice")


def test_every_event_type_converts_to_its_oneof_field() -> None:
    oneof = {f.name for f in run_pb2.RunEvent.DESCRIPTOR.oneofs_by_name["event"].fields}
    assert {ev.oneof_field(t) for t in ev.EVENT_TYPES} == oneof
    samples = {
        ev.RUN_STARTED: {
            "agent_name": "a",
            "input": "hi",
            "budgets": {"timeout": "30.000s", "max_model_steps": 3},
            "deadline": "2026-11-29T17:00:00.123Z",
        },
        ev.RETRY_SCHEDULED: {"call_id": "c", "attempt": 2, "delay": "0.250s", "reason": "TRANSIENT"},
        ev.TOOL_FAILED: {
            "step": 2,
            "call_id": "c",
            "tool": "t",
            "error": {"code": "TOOL_ERROR_CODE_INVALID_INPUT", "message": "bad"},
        },
        ev.RUN_ENDED: {
            "phase": "RUN_PHASE_COMPLETED",
            "reason": "final_answer",
            "partial": False,
            "usage": {"model_steps": 1},
        },
    }
    for event_type in ev.EVENT_TYPES:
        data = samples.get(event_type, {})
        message = event_to_proto(StoredEvent("r", 1, event_type, json.dumps(data), 1000))
        assert message.WhichOneof("event") == ev.oneof_field(event_type)
    started = event_to_proto(StoredEvent("r", 1, ev.RUN_STARTED, json.dumps(samples[ev.RUN_STARTED]), 1))
    assert (
        started.run_started.budgets.timeout.seconds == 30 and started.run_started.deadline.nanos == 123000000
    )
    ended = event_to_proto(StoredEvent("r", 2, ev.RUN_ENDED, json.dumps(samples[ev.RUN_ENDED]), 1))
    assert ended.run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
    failed = event_to_proto(StoredEvent("r", 3, ev.TOOL_FAILED, json.dumps(samples[ev.TOOL_FAILED]), 1))
    assert failed.tool_failed.error.code == 1


def test_every_event_the_decider_produces_converts_to_proto() -> None:
    from agentrt.server.core import Budgets, LoopPolicy, Policy
    from tests.unit.test_core_decide import simulate

    logs = [
        simulate([1, 2, 1], Budgets()),
        simulate([1] * 8, Budgets(), args=lambda step, i: json.dumps({"same": True})),
        simulate(
            [1] * 8,
            Budgets(),
            policy=Policy(loops=LoopPolicy(max_identical_calls=0, max_steps_without_new_fact=2)),
            fresh_results=False,
        ),
        simulate([1, 1], Budgets(), cancel_after_events=5),
        simulate([1], Budgets(), now_s=10, deadline_s=5),
        simulate([3, 3], Budgets(max_tool_calls=4)),
    ]
    for log in logs:
        for seq, event in enumerate(log, start=1):
            event_type, payload = encode_event(event)
            message = event_to_proto(StoredEvent("r", seq, event_type, payload, 1000))
            assert message.WhichOneof("event") == ev.oneof_field(event.type_name)
