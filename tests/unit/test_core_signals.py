"""core/_signals.py: people's decisions as typed signals, decided and applied by one pure function."""

from __future__ import annotations

import copy
import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrt.server.core import (
    Applied,
    ApprovalDecision,
    ApprovalRequested,
    ApprovalResolved,
    ApproverScope,
    Budgets,
    CancelRequested,
    CancelRun,
    Event,
    GrantBudget,
    ModelCompleted,
    OutcomeDecision,
    OutcomeResolved,
    Phase,
    Refused,
    ResolveApproval,
    ResolveOutcome,
    RunEnded,
    RunFailed,
    RunSignal,
    RunStarted,
    RunState,
    SignalRules,
    SignalTarget,
    StepStarted,
    ToolCallRequest,
    ToolErrorCode,
    ToolFailed,
    ToolOutcomeUnknown,
    ToolStarted,
    Usage,
    apply_signal,
    budget_grant,
    decide_signal,
    replay,
    rfc3339,
)

ASKED_MS = 1_800_000_000_000
EXPIRES_MS = ASKED_MS + 600_000


def asked(*, call_id: str = "c1", tool: str = "refund.issue") -> ApprovalRequested:
    return ApprovalRequested(
        approval_id="ap1",
        call_id=call_id,
        tool=tool,
        arguments_json='{"order_id":"A1"}',
        args_hash="h" * 64,
        expire_time=rfc3339(EXPIRES_MS),
        request_time=rfc3339(ASKED_MS),
    )


def to_tools() -> list[Event]:
    return [
        RunStarted(agent_name="refunds", input="refund A1", started_by="alice"),
        StepStarted(step=1),
        ModelCompleted(
            step=1,
            tool_calls=(ToolCallRequest("c1", "refund.issue", '{"order_id":"A1"}'),),
            usage_after=Usage(model_steps=1, input_tokens=10),
        ),
    ]


def waiting_for_call() -> RunState:
    return replay("run-1", [*to_tools(), asked()])


def waiting_for_budget() -> RunState:
    events: list[Event] = [RunStarted(agent_name="refunds", input="go"), StepStarted(step=1)]
    events += [ModelCompleted(step=1, tool_calls=(ToolCallRequest("c1", "t", "{}"),))]
    events += [asked(call_id="", tool="budget.tool_calls")]
    return replay("run-1", events)


def unknown_outcome() -> RunState:
    started = ToolStarted(step=2, call_id="c1", tool="refund.issue", idempotency_key="k1", attempt=1)
    unknown = ToolOutcomeUnknown(step=2, call_id="c1", tool="refund.issue", idempotency_key="k1")
    return replay("run-1", [*to_tools(), started, unknown])


def approve(**changes: object) -> ResolveApproval:
    signal = ResolveApproval(
        approval_id="ap1", decision=ApprovalDecision.APPROVE, args_hash="h" * 64, approver="bob"
    )
    return dataclasses.replace(signal, **changes)  # type: ignore[arg-type]


def grant(**changes: object) -> GrantBudget:
    signal = GrantBudget(
        approval_id="ap1", decision=ApprovalDecision.APPROVE, args_hash="h" * 64, approver="bob"
    )
    return dataclasses.replace(signal, **changes)  # type: ignore[arg-type]


def settle(decision: OutcomeDecision, **changes: object) -> ResolveOutcome:
    signal = ResolveOutcome(call_id="c1", decision=decision, resolved_by="ops")
    return dataclasses.replace(signal, **changes)  # type: ignore[arg-type]


def row(state: RunState, *, revision: int = 7, started_by: str = "alice") -> SignalTarget:
    """The target as the API sees it: what the run's row holds (revision, who started it)."""
    return dataclasses.replace(
        SignalTarget.of_state(state), revision=revision, agent_name="refunds", started_by=started_by
    )


def refusal(verdict: Refused | Applied | None) -> tuple[str, str]:
    assert isinstance(verdict, Refused), verdict
    return type(verdict.error).__name__, verdict.error.reason


# -- deciding: a refusal for each way a decision can be wrong, in the order clients see them ----------


def test_an_approval_is_refused_for_each_way_it_can_be_wrong() -> None:
    target = row(waiting_for_call())
    cases: list[tuple[RunSignal, int, int, tuple[str, str]]] = [
        (approve(decision=ApprovalDecision.UNSPECIFIED), 7, ASKED_MS, ("InvalidRequest", "INVALID_REQUEST")),
        (approve(approval_id="other"), 7, ASKED_MS, ("NoSuchResource", "APPROVAL_NOT_FOUND")),
        (grant(), 7, ASKED_MS, ("InvalidRequest", "APPROVAL_KIND_MISMATCH")),
        (approve(args_hash="0" * 64), 7, ASKED_MS, ("RunStateConflict", "ARGS_HASH_MISMATCH")),
        (approve(), 6, ASKED_MS, ("StaleRevision", "STALE_REVISION")),
        (approve(), 7, EXPIRES_MS, ("RunStateConflict", "APPROVAL_EXPIRED")),
        # A forged hash is refused before a stale revision: the hash names what the person saw.
        (approve(args_hash=""), 6, EXPIRES_MS, ("RunStateConflict", "ARGS_HASH_MISMATCH")),
    ]
    for signal, revision, now_ms, expected in cases:
        verdict = decide_signal(
            target, signal, now_ms=now_ms, expected_revision=revision, rules=SignalRules()
        )
        assert refusal(verdict) == expected, signal
    assert decide_signal(target, approve(), now_ms=EXPIRES_MS - 1, expected_revision=7) is None


def test_an_approval_of_a_run_that_waits_for_nothing_names_the_phase() -> None:
    state = replay("run-1", to_tools())
    verdict = decide_signal(row(state), approve(), now_ms=ASKED_MS, expected_revision=7)
    assert refusal(verdict) == ("RunStateConflict", "RUN_NOT_WAITING_APPROVAL")
    assert isinstance(verdict, Refused) and verdict.error.metadata == {
        "run_id": "run-1",
        "phase": "TOOL_STEP",
    }


def test_a_budget_pause_is_answered_by_a_grant_and_not_by_an_approval() -> None:
    target = row(waiting_for_budget())
    assert decide_signal(target, grant(), now_ms=ASKED_MS, expected_revision=7) is None
    assert refusal(decide_signal(target, approve(), now_ms=ASKED_MS))[1] == "APPROVAL_KIND_MISMATCH"


def test_a_signal_queued_by_an_earlier_runtime_skips_the_hash_it_never_carried() -> None:
    target = SignalTarget.of_state(waiting_for_call())
    assert decide_signal(target, approve(args_hash=None), now_ms=ASKED_MS) is None
    assert refusal(decide_signal(target, approve(args_hash="x"), now_ms=ASKED_MS))[1] == "ARGS_HASH_MISMATCH"


def test_an_outcome_is_refused_for_each_way_it_can_be_wrong() -> None:
    target = row(unknown_outcome())
    cases: list[tuple[ResolveOutcome, int, tuple[str, str]]] = [
        (settle(OutcomeDecision.UNSPECIFIED), 7, ("InvalidRequest", "INVALID_REQUEST")),
        (settle(OutcomeDecision.FAILED), 6, ("StaleRevision", "STALE_REVISION")),
        (settle(OutcomeDecision.FAILED, call_id="c9"), 7, ("InvalidRequest", "UNKNOWN_CALL")),
    ]
    for signal, revision, expected in cases:
        assert refusal(decide_signal(target, signal, now_ms=0, expected_revision=revision)) == expected
    for decision in (OutcomeDecision.SUCCEEDED, OutcomeDecision.FAILED, OutcomeDecision.RETRY):
        assert decide_signal(target, settle(decision), now_ms=0, expected_revision=7) is None
    waiting = row(waiting_for_call())
    assert refusal(decide_signal(waiting, settle(OutcomeDecision.FAILED), now_ms=0)) == (
        "RunStateConflict",
        "RUN_NOT_IN_UNKNOWN_OUTCOME",
    )


def test_a_row_that_does_not_name_the_unknown_call_leaves_the_call_to_the_owner() -> None:
    legacy = dataclasses.replace(row(unknown_outcome()), unknown_call_id=None)
    assert decide_signal(legacy, settle(OutcomeDecision.FAILED, call_id="c9"), now_ms=0) is None
    # ... and the owner, which folded the log, refuses the wrong call.
    verdict = apply_signal(
        unknown_outcome(), Budgets(), settle(OutcomeDecision.FAILED, call_id="c9"), now_ms=0
    )
    assert refusal(verdict)[1] == "UNKNOWN_CALL"


@pytest.mark.parametrize("phase", list(Phase))
def test_a_cancel_is_refused_only_once_the_run_ended(phase: Phase) -> None:
    target = SignalTarget(run_id="r", phase=phase)
    verdict = decide_signal(target, CancelRun(reason="stop", requested_by="alice"), now_ms=0)
    if phase.terminal:
        assert refusal(verdict) == ("RunStateConflict", "RUN_ALREADY_ENDED")
    else:
        assert verdict is None


# -- who may send a signal --------------------------------------------------------------------------


def test_own_runs_only_lets_a_runner_cancel_its_own_runs_and_operators_any() -> None:
    target = row(waiting_for_call(), started_by="alice")
    by_dave, by_alice = (
        CancelRun(reason="x", requested_by="dave"),
        CancelRun(reason="x", requested_by="alice"),
    )
    policy = SignalRules(own_runs_only=True)
    assert refusal(decide_signal(target, by_dave, now_ms=0, rules=policy)) == (
        "NotPermitted",
        "OWN_RUNS_ONLY",
    )
    assert decide_signal(target, by_alice, now_ms=0, rules=policy) is None
    assert (
        decide_signal(target, by_dave, now_ms=0, rules=dataclasses.replace(policy, manages_runs=True)) is None
    )
    assert decide_signal(target, by_dave, now_ms=0, rules=SignalRules()) is None  # off: today's behaviour
    # Permission first: an ended run of someone else's is not described to the one refused.
    ended = dataclasses.replace(target, phase=Phase.COMPLETED)
    assert refusal(decide_signal(ended, by_dave, now_ms=0, rules=policy))[1] == "OWN_RUNS_ONLY"


def test_four_eyes_refuses_approving_ones_own_run_and_leaves_rejecting_open() -> None:
    for state, signal in (
        (waiting_for_call(), approve(approver="alice")),
        (waiting_for_budget(), grant(approver="alice")),
    ):
        target = row(state, started_by="alice")
        four_eyes = SignalRules(four_eyes=True, manages_runs=True)
        verdict = decide_signal(target, signal, now_ms=ASKED_MS, expected_revision=7, rules=four_eyes)
        assert refusal(verdict) == ("NotPermitted", "FOUR_EYES")
        rejected = dataclasses.replace(signal, decision=ApprovalDecision.REJECT)
        assert decide_signal(target, rejected, now_ms=ASKED_MS, expected_revision=7, rules=four_eyes) is None
        by_bob = dataclasses.replace(signal, approver="bob")
        assert decide_signal(target, by_bob, now_ms=ASKED_MS, expected_revision=7, rules=four_eyes) is None
        assert (
            decide_signal(target, signal, now_ms=ASKED_MS, expected_revision=7, rules=SignalRules()) is None
        )


def test_an_approver_scope_limits_agents_and_tools() -> None:
    target = row(waiting_for_call())
    for scope, allowed in (
        (ApproverScope(agents=frozenset({"refunds"})), True),
        (ApproverScope(tools=frozenset({"refund.issue"})), True),
        (ApproverScope(agents=frozenset({"billing"})), False),
        (ApproverScope(tools=frozenset({"orders.lookup"})), False),
    ):
        rules = SignalRules(approver_scope=scope)
        verdict = decide_signal(target, approve(), now_ms=ASKED_MS, expected_revision=7, rules=rules)
        assert (verdict is None) is allowed
        if not allowed:
            assert refusal(verdict) == ("NotPermitted", "APPROVER_OUT_OF_SCOPE")


# -- applying: what each accepted signal does --------------------------------------------------------


def test_an_approval_resolves_the_wait_and_moves_the_deadline_by_the_wait() -> None:
    state = waiting_for_call()
    before = copy.deepcopy(state)
    applied = apply_signal(
        state, Budgets(), approve(comment="ok", override_intent=True), now_ms=ASKED_MS + 5000
    )
    assert state == before  # pure: the shell folds the events
    assert isinstance(applied, Applied)
    assert applied.events == (
        ApprovalResolved(
            approval_id="ap1",
            decision=ApprovalDecision.APPROVE,
            approver="bob",
            comment="ok",
            override_intent=True,
        ),
    )
    assert applied.waited_ms == 5000 and applied.budgets is None and applied.outcome is None
    for event in applied.events:
        state.apply(event)
    assert state.phase is Phase.TOOL_STEP and state.calls[0].approved and state.calls[0].override_intent


def test_a_rejection_shows_the_model_who_rejected_it_and_the_call_never_runs() -> None:
    applied = apply_signal(
        waiting_for_call(),
        Budgets(),
        approve(decision=ApprovalDecision.REJECT, comment="too much"),
        now_ms=ASKED_MS,
    )
    assert isinstance(applied, Applied)
    resolved, failed = applied.events
    assert isinstance(resolved, ApprovalResolved) and not resolved.override_intent
    assert isinstance(failed, ToolFailed) and failed.call_id == "c1" and failed.step == 2
    assert (
        failed.error.code is ToolErrorCode.PERMANENT and failed.error.message == "rejected by bob: too much"
    )


def test_a_grant_doubles_the_spent_budget_and_a_refusal_ends_the_run() -> None:
    budgets = Budgets(max_tool_calls=3)
    granted = apply_signal(waiting_for_budget(), budgets, grant(), now_ms=ASKED_MS + 1)
    assert isinstance(granted, Applied) and granted.budgets == budget_grant(budgets, "tool_calls")[2]
    assert granted.budgets is not None and granted.budgets.max_tool_calls == 6 and granted.waited_ms == 1
    refused = apply_signal(
        waiting_for_budget(), budgets, grant(decision=ApprovalDecision.REJECT), now_ms=ASKED_MS
    )
    assert isinstance(refused, Applied) and refused.budgets is None
    state = waiting_for_budget()
    for event in refused.events:
        state.apply(event)
    assert [type(e) for e in refused.events] == [ApprovalResolved, RunFailed, RunEnded]
    assert state.phase is Phase.FAILED and state.reason == "budget_exhausted:tool_calls"


def test_a_person_settles_an_unknown_outcome_three_ways() -> None:
    succeeded = apply_signal(unknown_outcome(), Budgets(), settle(OutcomeDecision.SUCCEEDED), now_ms=0)
    assert isinstance(succeeded, Applied) and succeeded.outcome is not None
    assert succeeded.outcome.result_json == "{}"  # no result given: an empty object
    assert succeeded.events == (
        OutcomeResolved(call_id="c1", decision=OutcomeDecision.SUCCEEDED, resolved_by="ops"),
    )
    failed = apply_signal(
        unknown_outcome(), Budgets(), settle(OutcomeDecision.FAILED, comment="bank says no"), now_ms=0
    )
    assert isinstance(failed, Applied) and failed.outcome is not None
    assert (
        failed.outcome.result_json is None and failed.outcome.failure == "decided by a person: bank says no"
    )
    state = unknown_outcome()
    retried = apply_signal(state, Budgets(), settle(OutcomeDecision.RETRY), now_ms=0)
    assert isinstance(retried, Applied) and retried.outcome is None
    _, again = retried.events
    assert isinstance(again, ToolStarted) and (again.call_id, again.idempotency_key, again.attempt) == (
        "c1",
        "k1",
        2,
    )
    for event in retried.events:
        state.apply(event)
    assert state.phase is Phase.TOOL_STEP and state.usage.calls_per_tool == {
        "refund.issue": 1
    }  # counted once


def test_a_cancel_is_appended_where_the_phase_takes_it_and_kept_where_it_waits() -> None:
    cancel = CancelRun(reason="stop", requested_by="alice")
    now = apply_signal(waiting_for_call(), Budgets(), cancel, now_ms=0)
    assert isinstance(now, Applied) and now.events == (CancelRequested(reason="stop", requested_by="alice"),)
    later = apply_signal(unknown_outcome(), Budgets(), cancel, now_ms=0)  # the write's outcome comes first
    assert isinstance(later, Applied) and later.events == ()
    ended = waiting_for_budget()
    for event in apply_signal(ended, Budgets(), grant(decision=ApprovalDecision.REJECT), now_ms=0).events:  # type: ignore[union-attr]
        ended.apply(event)
    assert refusal(apply_signal(ended, Budgets(), cancel, now_ms=0))[1] == "RUN_ALREADY_ENDED"


def test_a_signal_the_run_moved_past_changes_nothing() -> None:
    state = waiting_for_call()
    for event in apply_signal(state, Budgets(), approve(), now_ms=ASKED_MS).events:  # type: ignore[union-attr]
        state.apply(event)
    before = copy.deepcopy(state)
    again = apply_signal(state, Budgets(), approve(decision=ApprovalDecision.REJECT), now_ms=ASKED_MS)
    assert refusal(again)[1] == "RUN_NOT_WAITING_APPROVAL" and state == before
    late = apply_signal(waiting_for_call(), Budgets(), approve(), now_ms=EXPIRES_MS)
    assert refusal(late)[1] == "APPROVAL_EXPIRED"


# -- the two asks agree ------------------------------------------------------------------------------

SIGNALS = st.one_of(
    st.builds(
        ResolveApproval,
        approval_id=st.sampled_from(["ap1", "ap2"]),
        decision=st.sampled_from(list(ApprovalDecision)),
        args_hash=st.sampled_from(["h" * 64, "0" * 64, None]),
        approver=st.sampled_from(["alice", "bob"]),
        override_intent=st.booleans(),
    ),
    st.builds(
        GrantBudget,
        approval_id=st.sampled_from(["ap1", "ap2"]),
        decision=st.sampled_from(list(ApprovalDecision)),
        args_hash=st.sampled_from(["h" * 64, None]),
        approver=st.sampled_from(["alice", "bob"]),
    ),
    st.builds(
        ResolveOutcome,
        call_id=st.sampled_from(["c1", "c9"]),
        decision=st.sampled_from(list(OutcomeDecision)),
        resolved_by=st.just("ops"),
    ),
    st.builds(CancelRun, reason=st.just("stop"), requested_by=st.sampled_from(["alice", "dave"])),
)
STATES = st.sampled_from(
    [waiting_for_call, waiting_for_budget, unknown_outcome, lambda: replay("run-1", to_tools())]
)


@given(signal=SIGNALS, make=STATES, now_ms=st.sampled_from([ASKED_MS, EXPIRES_MS - 1, EXPIRES_MS]))
def test_the_row_and_the_folded_state_decide_alike(signal: RunSignal, make: object, now_ms: int) -> None:
    """What the API answers from the row is what the owner decides when it applies the signal."""
    state = make()  # type: ignore[operator]
    at_api = decide_signal(row(state), signal, now_ms=now_ms, expected_revision=7)
    at_owner = apply_signal(state, Budgets(), signal, now_ms=now_ms)
    assert (at_api is None) == isinstance(at_owner, Applied)
    if at_api is not None:
        assert refusal(at_owner) == refusal(at_api)
