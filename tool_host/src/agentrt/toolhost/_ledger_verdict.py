"""What a call meets in the ledger when its key is already there: one pure decision for every backend.

A host pool shares one ledger, so an entry left RUNNING is either this host's own call in flight,
another live host's call in flight, or the call of a host that died while it ran (an orphan). Which
owner is alive is told by its heartbeat (:func:`owner_alive`); with a ledger of one host (SQLite)
every other owner is an earlier, dead life of it.
"""

from __future__ import annotations

import dataclasses
import enum

from agentrt.toolhost._ledger_types import (
    Busy,
    Conflict,
    Decision,
    InFlight,
    OperationRecord,
    OperationStatus,
    OutcomeUnknown,
    Replay,
    Start,
)

__all__ = ["Verdict", "decision_of", "owner_alive", "rerun_record", "verdict_on"]


class Verdict(enum.Enum):
    """What to do with a call whose key the ledger already holds."""

    CONFLICT = "conflict"  # the key was used for another tool or other arguments
    IN_FLIGHT = "in_flight"  # this host life runs it now: wait for it
    BUSY = "busy"  # another live host of the pool runs it now: do not run it here
    OUTCOME_UNKNOWN = "outcome_unknown"  # a dead owner left a write RUNNING: its effect is unknown
    REPLAY = "replay"  # a final outcome is recorded
    RUN_AGAIN = "run_again"  # a retryable failure, or a safe call a dead owner left RUNNING


def owner_alive(*, beat_ns: int | None, now_ns: int, ttl_ns: int) -> bool:
    """True when an owner's last heartbeat (None: none, or it signed off) is younger than ``ttl_ns``.

    Both times come from one clock (the database's), so hosts' clocks may disagree.
    """
    return beat_ns is not None and now_ns - beat_ns < ttl_ns


def verdict_on(
    record: OperationRecord,
    *,
    tool: str,
    input_hash: str,
    me: str,
    record_owner_alive: bool,
    rerun_after_crash: bool,
) -> Verdict:
    """Decide about a call of ``tool`` with ``input_hash`` whose key holds ``record``.

    Args:
        record: The entry of the call's key.
        tool: The call's tool.
        input_hash: sha256 of the call's canonical arguments.
        me: This host life's owner id.
        record_owner_alive: Whether the entry's owner (when not ``me``) is a live host.
        rerun_after_crash: The tool is read-only or idempotent.
    """
    if record.tool != tool or record.input_hash != input_hash:
        return Verdict.CONFLICT
    if record.status is OperationStatus.RUNNING:
        if record.owner == me:
            return Verdict.IN_FLIGHT
        if record_owner_alive:
            # Even a safe call is not run twice at once: at most one execution per key at a time.
            return Verdict.BUSY
        return Verdict.RUN_AGAIN if rerun_after_crash else Verdict.OUTCOME_UNKNOWN
    if record.outcome is not None and not record.outcome.retryable:
        return Verdict.REPLAY
    return Verdict.RUN_AGAIN


def decision_of(verdict: Verdict, record: OperationRecord) -> Decision | None:
    """The answer a verdict other than RUN_AGAIN gives; None for RUN_AGAIN (record RUNNING first)."""
    match verdict:
        case Verdict.CONFLICT:
            return Conflict(record)
        case Verdict.IN_FLIGHT:
            return InFlight(record)
        case Verdict.BUSY:
            return Busy(record)
        case Verdict.OUTCOME_UNKNOWN:
            return OutcomeUnknown(record)
        case Verdict.REPLAY:
            return Replay(record)
        case Verdict.RUN_AGAIN:
            return None


def rerun_record(record: OperationRecord, *, owner: str, run_id: str, call_id: str, now_ns: int) -> Start:
    """The entry as recording it RUNNING again under ``owner`` leaves it."""
    return Start(
        dataclasses.replace(
            record,
            status=OperationStatus.RUNNING,
            outcome=None,
            owner=owner,
            run_id=run_id,
            call_id=call_id,
            executions=record.executions + 1,
            update_time_ns=now_ns,
        )
    )
