"""store/_signal_codec.py: queued signals stored typed (and read back from earlier runtimes' shapes),
and a run's row as a signal's target."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrt.server.config import AgentConfig
from agentrt.server.core import (
    ApprovalDecision,
    ApprovalRequested,
    CancelRun,
    GrantBudget,
    OutcomeDecision,
    Phase,
    QueuedSignal,
    ResolveApproval,
    ResolveOutcome,
    rfc3339,
)
from agentrt.server.engine import ResolvedAgent
from agentrt.server.store import (
    RunRecord,
    UndecodableSignal,
    decode_signal,
    encode_event,
    encode_signal,
    pending_approval_of,
    signal_target,
)
from agentrt.testing.engine import MemoryRunLog

TEXT = st.text(max_size=40)
HASH = st.one_of(st.none(), st.text(alphabet="0123456789abcdef", min_size=64, max_size=64))
QUEUED: st.SearchStrategy[QueuedSignal] = st.one_of(
    st.builds(
        ResolveApproval,
        approval_id=TEXT,
        decision=st.sampled_from(list(ApprovalDecision)),
        args_hash=HASH,
        approver=TEXT,
        comment=TEXT,
        override_intent=st.booleans(),
    ),
    st.builds(
        GrantBudget,
        approval_id=TEXT,
        decision=st.sampled_from(list(ApprovalDecision)),
        args_hash=HASH,
        approver=TEXT,
        comment=TEXT,
    ),
    st.builds(
        ResolveOutcome,
        call_id=TEXT,
        decision=st.sampled_from(list(OutcomeDecision)),
        resolved_by=TEXT,
        result_json=TEXT,
        comment=TEXT,
    ),
)


@given(QUEUED)
def test_every_queued_signal_reads_back_as_it_was_queued(signal: QueuedSignal) -> None:
    kind, payload = encode_signal(signal)
    assert decode_signal(kind, payload) == signal
    assert "APPROVAL_DECISION_" not in payload and "OUTCOME_DECISION_" not in payload  # the core's words


def test_each_signal_class_has_its_own_kind() -> None:
    approval = ResolveApproval(
        approval_id="a", decision=ApprovalDecision.APPROVE, args_hash="h", approver="b"
    )
    grant = GrantBudget(approval_id="a", decision=ApprovalDecision.APPROVE, args_hash="h", approver="b")
    outcome = ResolveOutcome(call_id="c", decision=OutcomeDecision.RETRY, resolved_by="o")
    kinds = [encode_signal(s)[0] for s in (approval, grant, outcome)]
    assert len(set(kinds)) == 3
    assert all(len(k) <= 40 for k in kinds)  # the kind column
    with pytest.raises(TypeError, match="CancelRun"):
        encode_signal(CancelRun(reason="x", requested_by="y"))  # type: ignore[arg-type]


def test_signals_queued_by_an_earlier_runtime_are_read() -> None:
    approval = decode_signal(
        "approval_decision",
        json.dumps(
            {
                "approval_id": "ap1",
                "decision": "APPROVAL_DECISION_APPROVE",
                "approver": "ana",
                "comment": "ok",
                "override_intent": True,
            }
        ),
    )
    assert approval == ResolveApproval(
        approval_id="ap1",
        decision=ApprovalDecision.APPROVE,
        args_hash=None,  # checked when it was queued; never stored
        approver="ana",
        comment="ok",
        override_intent=True,
    )
    outcome = decode_signal(
        "outcome_decision",
        json.dumps({"call_id": "c1", "decision": "OUTCOME_DECISION_SUCCEEDED", "result_json": '{"ok":1}'}),
    )
    assert outcome == ResolveOutcome(
        call_id="c1", decision=OutcomeDecision.SUCCEEDED, resolved_by="", result_json='{"ok":1}'
    )
    odd = decode_signal("approval_decision", json.dumps({"approval_id": "a", "decision": "MAYBE"}))
    assert isinstance(odd, ResolveApproval) and odd.decision is ApprovalDecision.UNSPECIFIED  # refused later


@pytest.mark.parametrize(
    ("kind", "payload"),
    [
        ("launch_missiles", "{}"),
        ("resolve_approval", "not json"),
        ("resolve_approval", "[1, 2]"),
        ("resolve_approval", json.dumps({"approval_id": "a", "approver": "b"})),  # no decision
        ("resolve_approval", json.dumps({"approval_id": "a", "decision": "MAYBE", "approver": "b"})),
        ("resolve_outcome", json.dumps({"call_id": 7, "decision": "FAILED"})),
        ("grant_budget", json.dumps({"approval_id": ["a"], "decision": "APPROVE"})),
    ],
)
def test_a_signal_no_runtime_wrote_is_undecodable(kind: str, payload: str) -> None:
    with pytest.raises(UndecodableSignal) as info:
        decode_signal(kind, payload)
    assert info.value.reason == "SIGNAL_UNDECODABLE" and info.value.metadata == {"kind": kind}


def record(**values: object) -> RunRecord:
    agent = ResolvedAgent.resolve("refunds", AgentConfig(), {})
    base = MemoryRunLog().create(agent=agent, input="x", owner="w", now_ms=1, budgets_json={}, deadline_ms=2)
    return dataclasses.replace(base, created_by="alice", **values)  # type: ignore[arg-type]


def test_a_rows_target_is_its_phase_revision_pending_approval_and_unknown_call() -> None:
    asked = ApprovalRequested(
        approval_id="ap1", call_id="c1", tool="refund.issue", args_hash="h", expire_time=rfc3339(5000)
    )
    waiting = record(phase="WAITING_APPROVAL", revision=4, pending_approval=encode_event(asked)[1])
    assert pending_approval_of(waiting) == asked
    target = signal_target(waiting)
    assert (target.phase, target.revision, target.pending_approval) == (Phase.WAITING_APPROVAL, 4, asked)
    assert (target.agent_name, target.started_by, target.unknown_call_id) == ("refunds", "alice", None)
    unknown = signal_target(record(phase="UNKNOWN_OUTCOME", unknown_call_id="c1"))
    assert unknown.unknown_call_id == "c1" and unknown.pending_approval is None
