"""GetRunDiagnostics in the engine: the run's row, and its log folded, as one typed value.

The whole log is folded (not the checkpoint and its tail) because the latest error may be older
than the checkpoint; an operator's call is rare, and a run's log is bounded by its budgets.
Reading changes nothing: no lease is taken, no row is written.
"""

from __future__ import annotations

import asyncio
import json
import logging

from agentrt.server.core import (
    STATE_VERSION,
    DiagnosedError,
    Phase,
    RawEvent,
    ReconcileSchedule,
    RunDiagnostics,
    RunState,
    error_of,
    pending_calls,
    rfc3339,
    trace_id_of,
    upgrade,
)
from agentrt.server.engine._driver import read_log
from agentrt.server.engine._ports import Ports
from agentrt.server.store import RunRecord, StoredEvent, decode_event

__all__ = ["diagnose_run"]

log = logging.getLogger("agentrt.engine")
_FOLD_INLINE_EVENTS = 100  # longer logs are folded in a worker thread (a few ms and more)


def _fold(record: RunRecord, stored: list[StoredEvent]) -> tuple[RunState | None, DiagnosedError | None, str]:
    """The folded state and the latest error of the log; (None, None, why) when it cannot be folded."""
    try:
        raw: list[RawEvent] = [(e.type, json.loads(e.payload)) for e in stored]
        if record.state_version != STATE_VERSION:
            raw = upgrade(raw, from_version=record.state_version)
        state = RunState(run_id=record.run_id)
        last: DiagnosedError | None = None
        # An upgrade keeps one event per stored one, so seq and time still line up.
        aligned = len(raw) == len(stored)
        for index, (event_type, data) in enumerate(raw):
            event = decode_event(event_type, data)
            state.apply(event)
            state.seq += 1
            seq, time_ms = (stored[index].seq, stored[index].created_ms) if aligned else (state.seq, 0)
            last = error_of(event, seq=seq, time_ms=time_ms) or last
        return state, last, ""
    except Exception as exc:  # a diagnosis must not fail on the log it is asked to explain
        log.warning("run %s: diagnostics cannot fold its log: %s", record.run_id, type(exc).__name__)
        return None, None, f"the run's log cannot be folded by this runtime ({type(exc).__name__})"


async def diagnose_run(ports: Ports, record: RunRecord) -> RunDiagnostics:
    """What an operator is shown of the run of ``record`` (the caller found it in its tenant)."""
    state: RunState | None = None
    last_error: DiagnosedError | None = None
    if record.pruned_ms is not None:
        note = f"pruned by retention at {rfc3339(record.pruned_ms)}: only the row is left"
    else:
        # Only what the row has seen: a commit landing between the two reads would otherwise
        # show calls of a step the row's phase and revision do not know yet.
        stored = [e for e in await read_log(ports, record.run_id) if e.seq <= record.last_seq]
        if len(stored) > _FOLD_INLINE_EVENTS:
            # About 30 us an event: a long log is folded off the event loop, which keeps
            # driving this replica's runs meanwhile (the fold shares nothing with them).
            state, last_error, note = await asyncio.to_thread(_fold, record, stored)
        else:
            state, last_error, note = _fold(record, stored)
    phase = Phase(record.phase)
    calls = pending_calls(state) if state is not None else ()
    reconcile = None
    if phase is Phase.UNKNOWN_OUTCOME:
        unknown = next((c for c in calls if c.call_id == record.unknown_call_id), None) or next(
            (c for c in calls if c.unknown_since_ms), None
        )
        parked = record.lease_owner is None
        reconcile = ReconcileSchedule(
            call_id=record.unknown_call_id or (unknown.call_id if unknown else ""),
            next_attempt_ms=(record.wake_ms or 0) if parked else 0,
            attempts=record.reconcile_attempts or 0,
            unknown_since_ms=unknown.unknown_since_ms if unknown else 0,
        )
    return RunDiagnostics(
        run_id=record.run_id,
        phase=phase,
        cancel_requested_ms=record.cancel_requested_ms or 0,
        revision=record.revision,
        last_seq=record.last_seq,
        lease_owner=record.lease_owner or "",
        lease_expires_ms=(record.lease_expires_ms or 0) if record.lease_owner else 0,
        fencing_generation=record.lease_generation,
        fault_count=record.fault_count or 0,
        max_faults=ports.settings.faults.max_faults,
        last_error=last_error,
        pending_calls=calls,
        reconcile=reconcile,
        wake_ms=(record.wake_ms or 0) if record.lease_owner is None and not phase.terminal else 0,
        needs_attention=bool(record.needs_attention),
        attention_reason=(state.escalation or "") if state is not None else "",
        cleanup_status=record.cleanup_status,
        cleanups_unknown=record.cleanups_unknown or 0,
        cleanup_due_ms=record.cleanup_due_ms or 0,
        cleanup_retries=record.cleanup_retries or 0,
        trace_id=trace_id_of(record.trace_context),
        updated_ms=record.updated_ms,
        log_note=note,
    )
