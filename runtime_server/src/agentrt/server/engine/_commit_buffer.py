"""What a run's owner has decided but not committed yet, and the row as its last commit left it.

A :class:`CommitBuffer` is the mutable half of a run's context (the frozen half is
:class:`~agentrt.server.engine._details.RunDetails`): the events added since the last commit, the
row changes asked for between commits, the signals those events consumed, and the fence (revision)
the next commit must match. :meth:`CommitBuffer.row_update` says, without I/O, what the next commit
writes on the row; the run log encodes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

from agentrt.server.core import Event, Phase, RunEnded, RunState, Usage
from agentrt.server.store import CleanupColumns, RowUpdate

__all__ = ["NO_CHANGE", "CommitBuffer", "cleanup_columns"]

T = TypeVar("T")

NO_CHANGE = RowUpdate()


@dataclass(slots=True, kw_only=True)
class CommitBuffer:
    """The uncommitted part of one ownership of a run."""

    revision: int  # the row's revision as this owner last committed it: the next commit's fence
    committed_attempts: int  # reconcile_attempts as the row holds it
    needs_attention: bool  # as the row holds it
    cleanup_status: str  # as the row holds it ("" for none)
    pending: RowUpdate = NO_CHANGE  # row changes asked for between commits (budgets, deadline...)
    events: list[Event] = field(default_factory=list)
    consumed_signals: list[int] = field(default_factory=list)
    unrecorded: Usage = field(default_factory=Usage)  # model usage spent since the last commit
    released: bool = False  # the last commit (or a repark) gave the lease back

    @property
    def empty(self) -> bool:
        return not self.events and not self.consumed_signals and self.pending is NO_CHANGE

    def change(self, update: RowUpdate) -> None:
        """Ask the next commit to also write ``update`` on the row."""
        self.pending = self.pending.then(update)

    def row_update(
        self,
        state: RunState,
        *,
        now_ms: int,
        reconcile_attempts: int,
        cleanup_retry_interval_s: float,
        then: RowUpdate = NO_CHANGE,
    ) -> RowUpdate:
        """What the next commit writes on the row: the state's columns, what was asked since the
        last commit, then ``then``; and the columns derived from the state when they moved."""
        phase = state.phase
        unknown = state.unknown_call() if phase is Phase.UNKNOWN_OUTCOME else None
        # A wait a person must end, or a cancelled run that ended handing a write's outcome over.
        attention = state.escalation is not None or state.unknown_at_end
        cleanup_status = state.cleanup_status.value
        cleanup_moved = cleanup_status != self.cleanup_status or (state.ended and cleanup_status != "")
        update = RowUpdate(
            phase=phase,
            usage=state.usage,
            output=state.output,
            reason=state.reason,
            pending_approval=state.pending_approval,
            unknown_call_id=unknown.call_id if unknown is not None else None,
            output_ref=state.output_ref,
            release_lease=state.ended,  # the closing commit also gives the lease back: one commit
            ended=_partial_end(self.events) if state.ended else None,
            needs_attention=_changed(attention, self.needs_attention),
            cleanup=cleanup_columns(state, now_ms, cleanup_retry_interval_s) if cleanup_moved else None,
            reconcile_attempts=_changed(reconcile_attempts, self.committed_attempts),
        )
        if self.pending is not NO_CHANGE:
            update = update.then(self.pending)
        return update if then is NO_CHANGE else update.then(then)

    def landed(self, revision: int, update: RowUpdate) -> None:
        """The commit of ``update`` landed at ``revision``: start the next one empty."""
        self.revision = revision
        self.unrecorded = Usage()
        if update.needs_attention is not None:
            self.needs_attention = update.needs_attention
        if update.cleanup is not None:
            self.cleanup_status = update.cleanup.status
        if update.reconcile_attempts is not None:
            self.committed_attempts = update.reconcile_attempts
        self.released = update.release_lease
        self.events = []
        self.consumed_signals = []
        self.pending = NO_CHANGE


def cleanup_columns(state: RunState, now_ms: int, retry_interval_s: float) -> CleanupColumns:
    """The row's cleanup columns for ``state``: status, unknown count and the cleanup job's due time."""
    unknown = sum(1 for c in state.cleanups if c.unknown)
    due = now_ms + round(retry_interval_s * 1000) if state.ended and unknown else None
    return CleanupColumns(status=state.cleanup_status.value, unknown=unknown, due_ms=due)


def _changed(value: T, committed: T) -> T | None:
    return value if value != committed else None


def _partial_end(events: list[Event]) -> RunEnded | None:
    ended = next((e for e in events if isinstance(e, RunEnded)), None)
    return ended if ended is not None and ended.partial else None
