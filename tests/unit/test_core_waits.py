"""core/_waits.py: the reconcile backoff and when a wait escalates (pure)."""

from __future__ import annotations

import pytest

from agentrt.server.core import (
    ApprovalRequested,
    Phase,
    RunEscalated,
    RunState,
    WaitPolicy,
    escalation,
    escalation_due_ms,
    reconcile_delay_ms,
)

POLICY = WaitPolicy(reconcile_base_ms=1000, reconcile_cap_ms=60_000, operator_wait_cap_ms=86_400_000)


def test_the_reconcile_delay_doubles_to_its_cap_and_past_it_once_escalated() -> None:
    delays = [reconcile_delay_ms(attempt=n, escalated=False, policy=POLICY, rand=0.0) for n in range(1, 10)]
    assert delays == [1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000, 60000]
    assert reconcile_delay_ms(attempt=9, escalated=True, policy=POLICY, rand=0.0) == 256_000
    assert reconcile_delay_ms(attempt=500, escalated=True, policy=POLICY, rand=0.0) == 86_400_000
    assert reconcile_delay_ms(attempt=7, escalated=False, policy=POLICY, rand=0.999) >= 54_000


def test_an_approval_without_a_request_time_never_escalates_by_age() -> None:
    state = RunState(run_id="r", phase=Phase.WAITING_APPROVAL)
    state.pending_approval = ApprovalRequested(approval_id="a", call_id="")
    assert escalation_due_ms(state, deadline_ms=0, policy=POLICY) is None
    assert escalation(state, now_ms=10**15, deadline_ms=0, policy=POLICY) is None


def test_a_run_that_waits_on_nothing_cannot_be_escalated() -> None:
    state = RunState(run_id="r", phase=Phase.MODEL_STEP)
    assert escalation_due_ms(state, deadline_ms=0, policy=POLICY) is None
    with pytest.raises(ValueError, match="nothing waits"):
        state.apply(RunEscalated(reason="approval_age"))
