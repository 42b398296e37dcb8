"""Contained failures: an exception while driving one run is a ``run.fault`` of that run.

Before, an unexpected exception (a bug, a hook that raised, JSON that broke a parser)
left the run as persisted with its lease held; the lease expired, another owner
reclaimed it, re-asked the model and crashed again, until the deadline ended it
EXPIRED ``retryable``. Now the exception is caught here, recorded under the run's
lease and revision (with the model usage the attempt spent and nobody recorded,
and the run's fault count in the same transaction), and the run is driven again
from its last committed event after a bounded backoff, by this worker, without
giving the lease away. The ``faults.max_faults``-th fault ends the run FAILED
``internal_error:<class>``, with the done / not-done / unknown lists of its log; or, with
a write sent and not answered, records that write's outcome unknown and parks the run in
UNKNOWN_OUTCOME, where the reconcile path settles it (core ``decide_fault`` says which).

An environmental fault (``store.environmental``: the database, the network, the OS) is not
recorded nor counted: the store is likely what failed. The run is driven again after a
jittered backoff, from what is committed, until a streak of them outlasts
``faults.environmental_retry_s``; past that it is counted like any other fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import traceback
from pathlib import Path

from agentrt.server.config import wait_policy
from agentrt.server.core import (
    FAULT_PARK_S,
    STATE_VERSION,
    EnvironmentalStreak,
    Event,
    LeaseLost,
    Phase,
    RawEvent,
    RunFault,
    RunState,
    Usage,
    decide_environmental,
    decide_fault,
    ended_from_row,
    environmental_streak,
    fault_message,
    fault_park_ms,
    replay,
    unknown_after_faults,
    upgrade,
    usage_plus,
    write_in_doubt,
)
from agentrt.server.core import events as ev
from agentrt.server.engine._cleanup_step import handover_columns
from agentrt.server.engine._control import AGENT_TOOL_PREFIX, Cancelled
from agentrt.server.engine._driver import RunDriver, read_log
from agentrt.server.engine._ports import Fresh, Ports
from agentrt.server.engine._run import RunHandle, cancellable, commit_after_row
from agentrt.server.engine._tool_step import is_write
from agentrt.server.store import (
    Environmental,
    RowUpdate,
    RunRecord,
    StoredEvent,
    decode_event,
    environmental,
)
from agentrt.server.telemetry import log_failure

log = logging.getLogger("agentrt.engine")


async def drive_contained(ports: Ports, handle: RunHandle, fresh: Fresh | None) -> None:
    """Drive a run until it ends, parks or is given up; each fault is recorded, never looped on.

    Raises:
        LeaseLost: the run now belongs to another worker (the caller stops writing).
    """
    streak: EnvironmentalStreak | None = None
    while True:
        driver = RunDriver(ports, handle)
        try:
            await driver.drive(fresh)
            return
        except (LeaseLost, asyncio.CancelledError):
            raise
        except Exception as exc:
            delay = None
            kind = environmental(exc)
            if kind is not None:
                revision = driver.ctx.commits.revision if driver.ctx is not None else None
                streak = environmental_streak(streak, now_s=ports.clock(), revision=revision)
                delay = _environmental_delay(ports, handle, exc, kind, streak)
            if delay is None:
                delay = await _counted(ports, driver, exc)
                if streak is not None:  # a counted fault moved the row; the run did not commit
                    streak = streak.after_own_commit()
        if delay is None or ports.stopping():
            return
        fresh = None  # the next attempt starts from what is committed
        with contextlib.suppress(Cancelled):  # a cancel request cuts the wait; the next attempt ends it
            await cancellable(handle, functools.partial(ports.sleep, delay))


async def _counted(ports: Ports, driver: RunDriver, exc: Exception) -> float | None:
    """Record ``exc`` as a counted fault; the delay before the next attempt, None to stop.

    Raises:
        LeaseLost: the run now belongs to another worker.
    """
    log.error("run %s: fault while driving it", driver.run_id, exc_info=exc)
    try:
        return await record_fault(ports, driver, exc)
    except LeaseLost:
        raise
    except Exception as failure:
        log_failure(
            log, failure, "run %s: its fault could not be recorded; the lease will lapse", driver.run_id
        )
        return None


def _environmental_delay(
    ports: Ports, handle: RunHandle, exc: Exception, kind: Environmental, streak: EnvironmentalStreak
) -> float | None:
    """The wait before retrying an environmental fault uncounted; None: it is to be counted."""
    now_s = ports.clock()
    settings = ports.settings
    retry = decide_environmental(
        streak,
        now_s=now_s,
        bound_s=settings.faults.environmental_retry_s,
        base_s=settings.retry_base_s,
        cap_s=settings.retry_cap_s,
        rand=ports.rand(),
    )
    if not retry.retry:
        log.warning(
            "run %s: environmental faults for %.1fs (faults.environmental_retry_s); counting this one",
            handle.run_id,
            now_s - streak.began_s,
        )
        return None
    ports.counters.inc("environmental_fault_count")
    # The type and place only: a driver's message may quote a URL with its credentials.
    log.warning(
        "run %s: %s (%s) at %s; retrying in %.2fs, not counted as a fault",
        handle.run_id,
        type(exc).__name__,
        kind.value,
        _where(exc),
        retry.delay_s,
    )
    return retry.delay_s


async def record_fault(ports: Ports, driver: RunDriver, exc: Exception) -> float | None:
    """Commit a run.fault (and, past the limit, the run's end or its unknown outcome); the delay
    before the next attempt.

    Works from the run's row and its log, not the driver's state: the state may be what failed to
    build, and it may hold events that were never committed.
    Returns None when the run ended or parked, or is not this worker's any more.
    """
    record = await ports.log.get_run(driver.run_id)
    if record is None or record.lease_owner != ports.owner:
        return None
    phase = Phase(record.phase)
    if phase.terminal:
        return None  # the closing commit went through; what failed came after it
    stored = await read_log(ports, record.run_id)
    state = _fold(record, stored)
    doubtful = write_in_doubt(state, is_write=functools.partial(_is_write, ports)) if state else None
    error_class = type(exc).__name__
    settings = ports.settings
    decision = decide_fault(
        previous_faults=record.fault_count,
        max_faults=settings.faults.max_faults,
        error_class=error_class,
        environmental=environmental(exc) is not None or isinstance(exc, MemoryError),
        unknown_outcome=phase is Phase.UNKNOWN_OUTCOME,
        write_in_doubt=doubtful is not None,
        base_s=settings.retry_base_s,
        cap_s=settings.retry_cap_s,
    )
    ctx = driver.ctx
    spent = ctx.commits.unrecorded if ctx is not None else Usage()
    after = usage_plus(_usage(record), spent)
    secrets = ctx.hidden if ctx is not None else ()  # the model profile's key never enters an event
    message = fault_message(error_class, str(exc), _where(exc), secrets=secrets)
    fault = RunFault(
        step=ctx.state.step if ctx is not None else 0,
        error_class=error_class,
        message=message,
        fault_count=decision.fault_count,
        max_faults=settings.faults.max_faults,
        usage_spent=spent.totals(),
        usage_after=after.totals(),
    )
    if state is None:  # a log this runtime cannot fold: the row is all there is
        state = RunState(run_id=record.run_id, phase=phase, seq=record.last_seq, usage=after)
        state.any_tool_started = any(e.type == ev.TOOL_STARTED for e in stored)
    else:
        _add(state, fault)
    events: list[Event] = [fault]
    now_ms = ports.now_ms()
    update = RowUpdate(fault_count=decision.fault_count, usage=after)
    if decision.end:
        ending = ended_from_row(state, decision.reason, message=message, retryable=decision.retryable)
        events += ending
        ended = ending[-1]
        update = update.then(
            RowUpdate(
                phase=Phase.FAILED,
                reason=decision.reason,
                pending_approval=None,
                release_lease=True,
                ended=ended if isinstance(ended, ev.RunEnded) else None,
                # Ended from the row, without its cleanups: the cleanup job releases them.
                cleanup=handover_columns(record, [(e.type, e.payload) for e in stored], now_ms),
            )
        )
    elif decision.unknown and doubtful is not None:
        # The write may have taken effect: never FAILED (R4.4). Its ledger settles it, as any other.
        unknown = unknown_after_faults(doubtful, now_ms=now_ms, fault_count=decision.fault_count)
        _add(state, unknown)
        events.append(unknown)
        policy = wait_policy(settings.reconcile, settings.escalation)
        wake_ms = fault_park_ms(
            state, now_ms=now_ms, deadline_ms=record.deadline_ms, policy=policy, rand=ports.rand()
        )
        update = update.then(
            RowUpdate(
                phase=Phase.UNKNOWN_OUTCOME,
                unknown_call_id=doubtful.call_id,  # ResolveOutcome checks it
                wake_ms=wake_ms,
                reconcile_attempts=1,
                release_lease=True,
            )
        )
    elif decision.park:  # UNKNOWN_OUTCOME is never collapsed into FAILED (R4.4): a person settles it
        update = update.then(RowUpdate(wake_ms=now_ms + int(FAULT_PARK_S * 1000), release_lease=True))
    await commit_after_row(ports, record, events, update, now_ms)
    ports.counters.inc("run_fault_count")
    if decision.unknown:
        ports.counters.inc("unknown_result_count")
        log.warning(
            "run %s: fault limit reached with %s in flight; parked in UNKNOWN_OUTCOME for its ledger",
            record.run_id,
            doubtful.call_id if doubtful is not None else "?",
        )
    if decision.end:
        ports.counters.inc("runs_ended")
        if state.any_tool_started:
            ports.counters.inc("partial_run_count")
        return None
    return None if decision.park else decision.delay_s


def _is_write(ports: Ports, tool: str) -> bool:
    # A child run is re-attached by its request key, not sent twice: never a write in doubt.
    return not tool.startswith(AGENT_TOOL_PREFIX) and is_write(ports.tools.spec(tool))


def _fold(record: RunRecord, stored: list[StoredEvent]) -> RunState | None:
    """The run's state from its whole log; None when this runtime cannot fold it."""
    try:
        raw: list[RawEvent] = [(e.type, json.loads(e.payload)) for e in stored]
        if record.state_version != STATE_VERSION:
            raw = upgrade(raw, from_version=record.state_version)
        return replay(record.run_id, [decode_event(event_type, data) for event_type, data in raw])
    except Exception:  # recording the fault must not fault in turn: the row is used instead
        log.warning("run %s: its log cannot be folded; its end is made from the row", record.run_id)
        return None


def _add(state: RunState, event: Event) -> None:
    state.apply(event)
    state.seq += 1


def _usage(record: RunRecord) -> Usage:
    try:
        data = json.loads(record.usage or "{}")
    except ValueError:  # recording the fault must not fault in turn
        data = {}
    return Usage.from_json(data)


def _where(exc: BaseException) -> str:
    """The innermost frame that raised: file name, line and function (no paths, no locals)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    frame = frames[-1]
    return f"{Path(frame.filename).name}:{frame.lineno} in {frame.name}"
