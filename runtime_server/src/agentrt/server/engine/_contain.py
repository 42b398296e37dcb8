"""Contained failures: an exception while driving one run is a ``run.fault`` of that run.

Before, an unexpected exception (a bug, a hook that raised, JSON that broke a parser)
left the run as persisted with its lease held; the lease expired, another owner
reclaimed it, re-asked the model and crashed again, until the deadline ended it
EXPIRED ``retryable``. Now the exception is caught here, recorded under the run's
lease and revision (with the model usage the attempt spent and nobody recorded,
and the run's fault count in the same transaction), and the run is driven again
from its last committed event after a bounded backoff, by this worker, without
giving the lease away. The ``faults.max_faults``-th fault ends the run FAILED
``internal_error:<class>`` (core ``decide_fault`` says when, and whether retryable).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import traceback
from pathlib import Path
from typing import Any

import sqlalchemy.exc

from agentrt.server.core import (
    FAULT_PARK_S,
    Event,
    LeaseLost,
    Phase,
    RunFault,
    RunState,
    Usage,
    decide_fault,
    end_events,
    fault_message,
    usage_plus,
)
from agentrt.server.core import events as ev
from agentrt.server.engine._cleanup_step import handover_values
from agentrt.server.engine._control import Cancelled
from agentrt.server.engine._driver import RunDriver, read_log
from agentrt.server.engine._ports import Fresh, Ports
from agentrt.server.engine._run import RunHandle, cancellable, commit_after_row
from agentrt.server.store import RunRecord

log = logging.getLogger("agentrt.engine")

# The store or the network failed, not our logic: the same run started again may well succeed.
_ENVIRONMENTAL: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    MemoryError,
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.InterfaceError,
    sqlalchemy.exc.TimeoutError,
)


async def drive_contained(ports: Ports, handle: RunHandle, fresh: Fresh | None) -> None:
    """Drive a run until it ends, parks or is given up; each fault is recorded, never looped on.

    Raises:
        LeaseLost: the run now belongs to another worker (the caller stops writing).
    """
    while True:
        driver = RunDriver(ports, handle)
        try:
            await driver.drive(fresh)
            return
        except (LeaseLost, asyncio.CancelledError):
            raise
        except Exception as exc:
            log.exception("run %s: fault while driving it", handle.run_id)
            try:
                delay = await record_fault(ports, driver, exc)
            except LeaseLost:
                raise
            except Exception:
                log.exception("run %s: the fault could not be recorded; the lease will lapse", handle.run_id)
                return
        if delay is None or ports.stopping():
            return
        fresh = None  # the next attempt starts from what is committed
        with contextlib.suppress(Cancelled):  # a cancel request cuts the wait; the next attempt ends it
            await cancellable(handle, functools.partial(ports.sleep, delay))


async def record_fault(ports: Ports, driver: RunDriver, exc: Exception) -> float | None:
    """Commit a run.fault (and, past the limit, the run's end); the delay before the next attempt.

    Works from the run's row, not the driver's state: the state may be what failed to build.
    Returns None when the run ended or parked, or is not this worker's any more.
    """
    record = await ports.log.get_run(driver.run_id)
    if record is None or record.lease_owner != ports.owner:
        return None
    phase = Phase(record.phase)
    if phase.terminal:
        return None  # the closing commit went through; what failed came after it
    error_class = type(exc).__name__
    settings = ports.settings
    decision = decide_fault(
        previous_faults=record.fault_count,
        max_faults=settings.faults.max_faults,
        error_class=error_class,
        environmental=isinstance(exc, _ENVIRONMENTAL),
        unknown_outcome=phase is Phase.UNKNOWN_OUTCOME,
        base_s=settings.retry_base_s,
        cap_s=settings.retry_cap_s,
    )
    ctx = driver.ctx
    spent = ctx.unrecorded if ctx is not None else Usage()
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
    events: list[Event] = [fault]
    now_ms = ports.now_ms()
    values: dict[str, Any] = {"fault_count": decision.fault_count, "usage": json.dumps(after.to_json())}
    if decision.end:
        state = RunState(run_id=record.run_id, phase=phase, seq=record.last_seq, usage=after)
        stored = await read_log(ports, record.run_id)
        state.any_tool_started = any(e.type == ev.TOOL_STARTED for e in stored)
        events += end_events(
            state, Phase.FAILED, decision.reason, message=message, retryable=decision.retryable
        )
        values.update(
            phase=Phase.FAILED.value,
            reason=decision.reason,
            pending_approval=None,
            lease_owner=None,
            lease_expires_ms=None,
        )
        # Ended from the row, without its cleanups: the cleanup job releases them.
        values.update(handover_values(record, [(e.type, e.payload) for e in stored], now_ms))
    elif decision.park:  # UNKNOWN_OUTCOME is never collapsed into FAILED (R4.4): a person settles it
        values.update(wake_ms=now_ms + int(FAULT_PARK_S * 1000), lease_owner=None, lease_expires_ms=None)
    await commit_after_row(ports, record, events, values, now_ms)
    ports.counters.inc("run_fault_count")
    if decision.end:
        ports.counters.inc("runs_ended")
        if state.any_tool_started:
            ports.counters.inc("partial_run_count")
        return None
    return None if decision.park else decision.delay_s


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
