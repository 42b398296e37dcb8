"""``sleep.wait``: an async tool that honours cancellation and deadlines, and says so in a log file.

Each call appends lines to ``<data_dir>/sleep_events.log``, so tests in another
process can prove what the tool observed::

    started <call_id>
    finished <call_id>      slept the whole time
    cancelled <call_id>     saw its cancellation signal (or was cancelled) and stopped
    timeout <call_id>       its deadline arrived before the sleep was over; stopped

``<call_id>`` is the call's ``x-agentrt-call-id``, or its idempotency key when none was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pydantic

from agentrt.toolhost import SideEffect, ToolCancelled, ToolContext, TransientError, tool

__all__ = ["SLEEP_LOG_FILE", "SleepArgs", "sleep_wait"]

SLEEP_LOG_FILE = "sleep_events.log"

_SLICE = 0.05  # seconds: how late a deadline may be noticed
_HOST_STOP_WAIT_S = 1.0  # how long a tool past its deadline waits for the host to stop it


class SleepArgs(pydantic.BaseModel):
    """Arguments of sleep.wait."""

    model_config = pydantic.ConfigDict(extra="forbid")

    seconds: float = pydantic.Field(ge=0, le=600, description="How long to sleep.")


def _log_event(ctx: ToolContext, event: str) -> None:
    ctx.data_dir.mkdir(parents=True, exist_ok=True)
    # One short append per line: O_APPEND keeps concurrent calls' lines whole.
    with open(ctx.data_dir / SLEEP_LOG_FILE, "a", encoding="utf-8") as log:
        log.write(f"{event} {ctx.call_id or ctx.idempotency_key}\n")


@tool(
    name="sleep.wait",
    description="Sleep for some seconds; stops early when cancelled or when its deadline arrives.",
    side_effect=SideEffect.READ_ONLY,
    idempotent=True,
    concurrency_safe=True,
    timeout=600.0,
)
async def sleep_wait(args: SleepArgs, ctx: ToolContext) -> dict[str, Any]:
    """Sleep in small slices, checking the cancellation signal and the deadline between them.

    Raises:
        ToolCancelled: The call was cancelled.
        TransientError: The deadline arrived first ("timeout").
    """
    _log_event(ctx, "started")
    started_at = time.time()  # wall clock, so callers can compare calls across processes
    end = time.monotonic() + args.seconds
    try:
        while (left := end - time.monotonic()) > 0:
            # The deadline first: the host signals cancellation when the deadline passes too, and
            # a tool that woke to that signal was stopped by its deadline, not by a caller.
            remaining = ctx.remaining()
            if remaining is not None and remaining <= 0:
                # A host stops a call at its deadline (signal, then cancel) and answers with its
                # typed timeout; the tool's timer may wake it first, so it waits for that stop and
                # answers for itself only where nothing enforces the deadline.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_HOST_STOP_WAIT_S):
                        await ctx.wait_cancelled()
                _log_event(ctx, "timeout")
                raise TransientError(
                    "timeout: the deadline arrived before the sleep was over",
                    details={"deadline_exceeded": True},
                )
            if ctx.is_cancelled():
                _log_event(ctx, "cancelled")
                raise ToolCancelled("sleep.wait was cancelled")
            step = min(_SLICE, left, remaining if remaining is not None else left)
            # Wakes at once on cancellation, otherwise after one slice.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(step):
                    await ctx.wait_cancelled()
    except asyncio.CancelledError:
        # The host cancelled the task outright (after its grace period).
        _log_event(ctx, "cancelled")
        raise
    _log_event(ctx, "finished")
    return {"slept": args.seconds, "started_at": started_at, "finished_at": time.time()}
