"""format_event / format_run / JSON renderings, and the package's exported names."""

from __future__ import annotations

import json

import pytest
from google.protobuf import duration_pb2, struct_pb2, timestamp_pb2

import agentrt.client as clients
from agentrt.client import event_to_json, event_type, format_event, format_run, format_run_line, run_to_json
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.proto.toolhost.v1 import tool_pb2

USAGE = run_pb2.Usage(model_steps=2, tool_calls=1, input_tokens=120, output_tokens=30, cost_micros=12_300)
EXPIRE = timestamp_pb2.Timestamp(seconds=1_700_000_000)

# One populated case and its expected line per RunEvent oneof field. A new event type
# without an entry here (and so, likely, without a formatter) fails test_every_case_is_covered.
CASES: dict[str, tuple[dict[str, object], str]] = {
    "run_started": (
        {"run_started": run_pb2.RunStarted(agent_name="refund-demo", input="Refund A100")},
        'run.started  agent=refund-demo input="Refund A100"',
    ),
    "step_started": (
        {"step_started": run_pb2.StepStarted(step=1, kind=run_pb2.STEP_KIND_MODEL)},
        "step.started  step=1 kind=model",
    ),
    "model_text_delta": (
        {"model_text_delta": run_pb2.ModelTextDelta(step=2, text="Your refund")},
        'model.text.delta  step=2 "Your refund"',
    ),
    "model_completed": (
        {
            "model_completed": run_pb2.ModelCompleted(
                step=1,
                tool_calls=[
                    run_pb2.ToolCall(
                        call_id="c1", tool="orders.lookup", arguments_json='{"order_id": "A100"}'
                    ),
                    run_pb2.ToolCall(
                        call_id="c2", tool="refund.issue", arguments_json='{"amount": 12.5, "note": "a b"}'
                    ),
                ],
            )
        },
        "model.completed  step=1 "
        'tool_calls=orders.lookup(order_id=A100), refund.issue(amount=12.5, note="a b")',
    ),
    "tool_started": (
        {
            "tool_started": run_pb2.ToolStarted(
                step=1, call_id="c1", tool="orders.lookup", arguments_json='{"order_id":"A100"}', attempt=1
            )
        },
        "tool.started  orders.lookup(order_id=A100) call=c1 attempt=1",
    ),
    "tool_completed": (
        {
            "tool_completed": run_pb2.ToolCompleted(
                tool="refund.issue", result_json='{"refund_id":"R-1"}', replayed=True
            )
        },
        'tool.completed  refund.issue -> {"refund_id": "R-1"} (replayed)',
    ),
    "tool_failed": (
        {
            "tool_failed": run_pb2.ToolFailed(
                call_id="c2",
                tool="refund.issue",
                error=tool_pb2.ToolError(code=tool_pb2.TOOL_ERROR_CODE_TRANSIENT, message="payments down"),
            )
        },
        "tool.failed  refund.issue !! TRANSIENT: payments down call=c2",
    ),
    "approval_requested": (
        {
            "approval_requested": run_pb2.ApprovalRequested(
                approval_id="ap-1",
                tool="refund.issue",
                arguments_json='{"order_id":"A100"}',
                args_hash="abc123",
                impact_summary="refund $12.50",
                expire_time=EXPIRE,
            )
        },
        "approval.requested  refund.issue(order_id=A100) approval_id=ap-1 args_hash=abc123 "
        'impact="refund $12.50" expires=2023-11-14T22:13:20Z',
    ),
    "approval_resolved": (
        {
            "approval_resolved": run_pb2.ApprovalResolved(
                approval_id="ap-1", decision=run_pb2.APPROVAL_DECISION_APPROVE, approver="ana", comment="ok"
            )
        },
        'approval.resolved  ap-1 APPROVE by=ana comment="ok"',
    ),
    "retry_scheduled": (
        {
            "retry_scheduled": run_pb2.RetryScheduled(
                call_id="c2",
                attempt=2,
                delay=duration_pb2.Duration(seconds=1, nanos=500_000_000),
                reason="TRANSIENT",
            )
        },
        "retry.scheduled  call=c2 attempt=2 in 1.5s reason=TRANSIENT",
    ),
    "run_checkpointed": (
        {"run_checkpointed": run_pb2.RunCheckpointed(through_seq=6)},
        "run.checkpointed  through_seq=6",
    ),
    "cancel_requested": (
        {"cancel_requested": run_pb2.CancelRequested(reason="user asked", requested_by="alice")},
        "cancel.requested  reason=user asked by=alice",
    ),
    "outcome_resolved": (
        {
            "outcome_resolved": run_pb2.OutcomeResolved(
                call_id="call_2_0",
                decision="OUTCOME_DECISION_SUCCEEDED",
                resolved_by="ops",
                comment="checked",
            )
        },
        'outcome.resolved  call=call_2_0 SUCCEEDED by=ops comment="checked"',
    ),
    "run_fault": (
        {
            "run_fault": run_pb2.RunFault(
                step=2,
                error_class="RecursionError",
                message="too deep",
                fault_count=1,
                max_faults=3,
                usage_after=run_pb2.Usage(model_steps=2),
            )
        },
        'run.fault  step=2 RecursionError fault 1/3 message="too deep" usage: '
        "model_steps=2 tool_calls=0 tokens=0/0 cost_usd=0.000000",
    ),
    "run_waiting": (
        {
            "run_waiting": run_pb2.RunWaiting(
                reason=run_pb2.WAIT_REASON_APPROVAL,
                phase=run_pb2.RUN_PHASE_WAITING_APPROVAL,
                detail="appr_1",
            )
        },
        'run.waiting  APPROVAL phase=WAITING_APPROVAL detail="appr_1"',
    ),
    "run_completed": (
        {"run_completed": run_pb2.RunCompleted(output="Refund R-1 issued.\nThanks")},
        'run.completed  output="Refund R-1 issued. Thanks"',
    ),
    "run_failed": (
        {"run_failed": run_pb2.RunFailed(reason="budget_exhausted:model_steps", message="3 of 3")},
        'run.failed  reason=budget_exhausted:model_steps message="3 of 3"',
    ),
    "run_cancelled": (
        {"run_cancelled": run_pb2.RunCancelled(reason="user asked")},
        "run.cancelled  reason=user asked",
    ),
    "run_ended": (
        {
            "run_ended": run_pb2.RunEnded(
                phase=run_pb2.RUN_PHASE_COMPLETED,
                reason="final_answer",
                partial=False,
                retryable=True,
                usage=USAGE,
            )
        },
        "run.ended  COMPLETED reason=final_answer partial=false retryable=true "
        "usage: model_steps=2 tool_calls=1 tokens=120/30 cost_usd=0.012300",
    ),
    "handoff": (
        {
            "handoff": run_pb2.Handoff(
                step=2, call_id="c1", from_agent="triage", to_agent="refunds", reason="money"
            )
        },
        'handoff  triage -> refunds reason="money"',
    ),
    "variables_set": (
        {
            "variables_set": run_pb2.VariablesSet(
                call_id="c1",
                tool="orders.lookup",
                variables={
                    "order_id": struct_pb2.Value(string_value="A100"),
                    "verified": struct_pb2.Value(bool_value=True),
                },
                removed=["old"],
            )
        },
        'variables.set  orders.lookup call=c1 order_id="A100" verified=true -old',
    ),
    "tool_outcome_unknown": (
        {
            "tool_outcome_unknown": run_pb2.ToolOutcomeUnknown(
                step=4, call_id="call_2", tool="refund.issue", idempotency_key="k1", reason="host unreachable"
            )
        },
        'tool.outcome.unknown  refund.issue ?? outcome unknown call=call_2 key=k1 reason="host unreachable"',
    ),
    "run_escalated": (
        {
            "run_escalated": run_pb2.RunEscalated(
                reason="unknown_outcome_age", age=duration_pb2.Duration(seconds=3600), call_id="call_2"
            )
        },
        "run.escalated  needs attention: unknown_outcome_age waited=3600s call=call_2",
    ),
    "run_closing": (
        {"run_closing": run_pb2.RunClosing(phase=run_pb2.RUN_PHASE_CANCELLED, reason="user")},
        'run.closing  ending CANCELLED reason="user": releasing registered resources first',
    ),
    "cleanup_registered": (
        {
            "cleanup_registered": run_pb2.CleanupRegistered(
                cleanup_id="c1",
                kind=run_pb2.CLEANUP_KIND_TOOL,
                target="sandbox.destroy",
                arguments_json='{"sandbox_id":"s1"}',
                call_id="call_1",
            )
        },
        'cleanup.registered  c1 tool sandbox.destroy {"sandbox_id":"s1"} call=call_1',
    ),
    "cleanup_started": (
        {"cleanup_started": run_pb2.CleanupStarted(cleanup_id="c1", attempt=2)},
        "cleanup.started  c1 attempt=2",
    ),
    "cleanup_completed": (
        {"cleanup_completed": run_pb2.CleanupCompleted(cleanup_id="c1", attempt=1)},
        "cleanup.completed  c1 released attempt=1",
    ),
    "summary_completed": (
        {
            "summary_completed": run_pb2.SummaryCompleted(
                step=5, text="Looked up orders 1-3.", entries=6, model="openai/gpt-x"
            )
        },
        'summary.completed  step=5 6 entries summarised by openai/gpt-x: "Looked up orders 1-3."',
    ),
    "cleanup_failed": (
        {
            "cleanup_failed": run_pb2.CleanupFailed(
                cleanup_id="c1", attempt=3, message="TRANSIENT: down", final=True
            )
        },
        'cleanup.failed  c1 attempt=3 "TRANSIENT: down" (given up: CLEANUP_UNKNOWN)',
    ),
    "cleanup_settled": (
        {"cleanup_settled": run_pb2.CleanupSettled(retries=2)},
        "cleanup.settled  every cleanup released (cleanup job passes: 2); the run's log is complete",
    ),
}

ONEOF_FIELDS = [f.name for f in run_pb2.RunEvent.DESCRIPTOR.oneofs_by_name["event"].fields]


def test_every_case_is_covered() -> None:
    assert sorted(CASES) == sorted(ONEOF_FIELDS)


@pytest.mark.parametrize("case", ONEOF_FIELDS)
def test_format_event_every_case(case: str) -> None:
    fields, expected = CASES[case]
    event = run_pb2.RunEvent(run_id="run-1", seq=7, **fields)  # type: ignore[arg-type]
    assert event.WhichOneof("event") == case
    line = format_event(event)
    assert line == f"#7  {expected}"
    assert "\n" not in line
    assert event_type(event) == case.replace("_", ".")


@pytest.mark.parametrize("case", ONEOF_FIELDS)
def test_format_event_empty_case_is_one_line(case: str) -> None:
    # A default-valued payload must still render (no crash on missing sub-messages).
    event = run_pb2.RunEvent(seq=1)
    getattr(event, case).SetInParent()
    line = format_event(event)
    assert line.startswith(f"#1  {case.replace('_', '.')}") and "\n" not in line


@pytest.mark.parametrize("case", ONEOF_FIELDS)
def test_event_to_json_is_one_parseable_line(case: str) -> None:
    fields, _ = CASES[case]
    event = run_pb2.RunEvent(run_id="run-1", seq=7, **fields)  # type: ignore[arg-type]
    text = event_to_json(event)
    assert "\n" not in text
    data = json.loads(text)
    assert data["run_id"] == "run-1" and data["seq"] == "7" and case in data


def test_live_delta_and_unknown_event() -> None:
    delta = run_pb2.RunEvent(seq=0, model_text_delta=run_pb2.ModelTextDelta(step=1, text="Hi"))
    assert format_event(delta) == '~  model.text.delta  step=1 "Hi"'
    # A newer server's event type this client cannot decode leaves the oneof unset.
    assert format_event(run_pb2.RunEvent(seq=4)) == "#4  unknown"
    assert event_type(run_pb2.RunEvent()) == "unknown"


def test_odd_tool_payloads_still_render() -> None:
    not_json = run_pb2.RunEvent(seq=1, tool_started=run_pb2.ToolStarted(tool="t", arguments_json="{oops"))
    assert format_event(not_json) == "#1  tool.started  t({oops) call= attempt=0"
    a_list = run_pb2.RunEvent(seq=1, tool_started=run_pb2.ToolStarted(tool="t", arguments_json="[1, 2]"))
    assert format_event(a_list) == "#1  tool.started  t([1, 2]) call= attempt=0"
    raw = run_pb2.RunEvent(seq=2, tool_completed=run_pb2.ToolCompleted(tool="t", result_json="plain text"))
    assert format_event(raw) == "#2  tool.completed  t -> plain text"
    huge = run_pb2.RunEvent(
        seq=3, tool_completed=run_pb2.ToolCompleted(tool="t", result_json='"' + "x" * 500 + '"')
    )
    line = format_event(huge)
    assert line.endswith("…") and len(line) < 260


def test_format_run_and_line() -> None:
    run = run_pb2.Run(
        run_id="run-1",
        agent_name="refund-demo",
        phase=run_pb2.RUN_PHASE_FAILED,
        revision=9,
        input="Refund A100",
        output="",
        reason="budget_exhausted:model_steps",
        usage=USAGE,
        session_id="s1",
        request_key="k1",
        last_seq=12,
        create_time=EXPIRE,
        update_time=EXPIRE,
        created_by="alice",
    )
    assert format_run(run).splitlines() == [
        "run run-1  FAILED  agent=refund-demo  revision=9",
        "  input:  Refund A100",
        "  reason: budget_exhausted:model_steps",
        "  usage:  model_steps=2 tool_calls=1 tokens=120/30 cost_usd=0.012300",
        "  created=2023-11-14T22:13:20Z updated=2023-11-14T22:13:20Z session=s1 request_key=k1 "
        "created_by=alice last_seq=12",
    ]
    assert (
        format_run_line(run)
        == "run-1  FAILED  refund-demo  2023-11-14T22:13:20Z  budget_exhausted:model_steps"
    )
    done = run_pb2.Run(run_id="r2", phase=run_pb2.RUN_PHASE_COMPLETED, output="ok")
    assert "  output: ok" in format_run(done).splitlines()
    assert "created_by" not in format_run(done)
    assert "owner" not in format_run(done)
    owned = run_pb2.Run(run_id="r3", lease_owner="pod-a", lease_expire_time=EXPIRE)
    assert "  owner:  pod-a (lease until 2023-11-14T22:13:20Z)" in format_run(owned).splitlines()
    assert format_run_line(done) == "r2  COMPLETED    -"
    data = json.loads(run_to_json(run))
    assert data["phase"] == "RUN_PHASE_FAILED" and data["run_id"] == "run-1" and "\n" not in run_to_json(run)


def test_run_started_shows_who_started_it() -> None:
    event = run_pb2.RunEvent(
        seq=1, run_started=run_pb2.RunStarted(agent_name="refund", input="hi", started_by="alice")
    )
    assert format_event(event) == '#1  run.started  agent=refund input="hi" by=alice'


def test_phase_name_of_unknown_value() -> None:
    assert clients.phase_name(run_pb2.RUN_PHASE_EXPIRED) == "EXPIRED"
    assert clients.phase_name(99) == "99"  # type: ignore[arg-type]


def test_all_is_complete_and_sorted() -> None:
    # Submodules (agentrt.client.cli) and the __future__ import are not API.
    public = {name for name in vars(clients) if not name.startswith("_")} - {"annotations", "cli"}
    assert set(clients.__all__) == public
    # isort-style, as ruff's RUF022 keeps it: CONSTANTS, then Classes, then functions.
    assert clients.__all__ == sorted(clients.__all__, key=lambda n: (not n.isupper(), not n[0].isupper(), n))


def test_a_partial_end_lists_done_not_done_and_unknown_calls() -> None:
    ended = run_pb2.RunEnded(
        phase=run_pb2.RUN_PHASE_CANCELLED,
        reason="stop",
        partial=True,
        completed_calls=[run_pb2.CallSummary(call_id="c1", tool="orders.lookup", step=1)],
        not_completed_calls=[
            run_pb2.CallSummary(call_id="c2", tool="mail.send", step=2, detail="not_started")
        ],
        unknown_calls=[run_pb2.CallSummary(call_id="c3", tool="refund.issue", step=2)],
    )
    line = format_event(run_pb2.RunEvent(seq=9, run_ended=ended))
    assert line.endswith("done=orders.lookup:c1 not_done=mail.send:c2 unknown=refund.issue:c3")
