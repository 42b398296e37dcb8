"""The commit buffer says, without I/O, what a run's next commit writes on its row."""

from __future__ import annotations

from agentrt.server.core import ApprovalRequested, Budgets, Phase, RunEnded, RunState, StepStarted
from agentrt.server.engine._commit_buffer import NO_CHANGE, CommitBuffer
from agentrt.server.store import KEEP, RowUpdate, row_values

APPROVAL = ApprovalRequested(approval_id="a1", call_id="c1", tool="pay")


def buffer(**committed: int | bool | str) -> CommitBuffer:
    row = {"revision": 4, "committed_attempts": 0, "needs_attention": False, "cleanup_status": ""}
    return CommitBuffer(**{**row, **committed})  # type: ignore[arg-type]


def test_a_later_update_wins_where_it_says_something_and_keeps_the_rest() -> None:
    first = RowUpdate(phase=Phase.MODEL_STEP, pending_approval=APPROVAL, wake_ms=5)
    assert first.then(RowUpdate(pending_approval=KEEP)) == first
    assert first.then(NO_CHANGE) is first
    cleared = first.then(RowUpdate(pending_approval=None, phase=Phase.TOOL_STEP))
    assert (cleared.phase, cleared.pending_approval, cleared.wake_ms) == (Phase.TOOL_STEP, None, 5)
    assert row_values(cleared)["pending_approval"] is None
    assert "pending_approval" not in row_values(RowUpdate(phase=Phase.MODEL_STEP))


def test_every_commit_writes_the_states_columns_and_only_what_moved_besides() -> None:
    state = RunState(run_id="r", phase=Phase.WAITING_APPROVAL, output="so far", pending_approval=APPROVAL)
    update = buffer().row_update(state, now_ms=1000, reconcile_attempts=0, cleanup_retry_interval_s=5)
    assert (update.phase, update.output, update.pending_approval) == (
        Phase.WAITING_APPROVAL,
        "so far",
        APPROVAL,
    )
    assert update.unknown_call_id is None  # not in UNKNOWN_OUTCOME: the row names no call
    # Neither attention, attempts nor cleanups moved since the last commit: not written.
    assert (update.needs_attention, update.reconcile_attempts, update.cleanup) == (None, None, None)
    assert not update.release_lease and update.ended is None
    state.escalation = "approval_age"
    update = buffer().row_update(state, now_ms=1000, reconcile_attempts=2, cleanup_retry_interval_s=5)
    assert (update.needs_attention, update.reconcile_attempts) == (True, 2)
    assert buffer(needs_attention=True, committed_attempts=2).row_update(
        state, now_ms=1000, reconcile_attempts=2, cleanup_retry_interval_s=5
    ) == RowUpdate(
        phase=Phase.WAITING_APPROVAL,
        usage=state.usage,
        output="so far",
        reason="",
        pending_approval=APPROVAL,
        unknown_call_id=None,
        output_ref=None,
    )


def test_changes_asked_between_commits_go_with_the_next_and_then_are_gone() -> None:
    commits = buffer()
    budgets = Budgets(max_model_steps=9)
    commits.change(RowUpdate(budgets=budgets))
    commits.change(RowUpdate(deadline_ms=77))
    assert not commits.empty
    state = RunState(run_id="r", phase=Phase.MODEL_STEP)
    update = commits.row_update(
        state, now_ms=1, reconcile_attempts=0, cleanup_retry_interval_s=5, then=RowUpdate(wake_ms=9)
    )
    assert (update.budgets, update.deadline_ms, update.wake_ms) == (budgets, 77, 9)
    commits.events.append(StepStarted(step=1))
    commits.landed(5, update)
    assert commits.empty and commits.revision == 5 and not commits.released


def test_the_closing_commit_gives_the_lease_back_with_a_partial_runs_summary() -> None:
    state = RunState(run_id="r", phase=Phase.FAILED, ended=True)
    commits = buffer()
    ended = RunEnded(phase=Phase.FAILED, partial=True)
    commits.events.append(ended)
    update = commits.row_update(state, now_ms=1, reconcile_attempts=0, cleanup_retry_interval_s=5)
    assert update.release_lease and update.ended is ended
    commits.landed(5, update)
    assert commits.released
    whole = buffer()
    whole.events.append(RunEnded(phase=Phase.COMPLETED))
    closing = whole.row_update(state, now_ms=1, reconcile_attempts=0, cleanup_retry_interval_s=5)
    assert closing.ended is None and "call_summary" not in row_values(closing)
