"""Running tool calls: deadlines, cancellation and recording outcomes in the ledger.

Each call runs as a task owned by the host, not by the RPC handler, so a call
outlives a cancelled or timed-out RPC until the tool has really stopped; its
true outcome is then recorded. A duplicate call with the same key that arrives
meanwhile waits for that task (R5.4).

A crash is never a cancellation. gRPC cancellation carries no reason, so a cancelled
InvokeTool RPC may just be a caller that died: a write (neither read-only nor
idempotent) then runs to completion and records its outcome, for the caller's
successor to find with GetOperation. Only an explicit cancel (:meth:`Operations.cancel`,
the CancelOperation RPC), a deadline or the host's own shutdown stops a write.

What the host can stop: an async tool is cancelled at its next ``await`` once the
grace has passed; a sync tool runs in a thread nothing can interrupt, so it only sees
``ctx.cancelled`` and its outcome is recorded whenever it returns. When the host stops
a tool where it stands, the recorded failure says ``"effect": "unknown"``: the host
cannot tell whether the effect happened, and a caller must not send the write again on
that answer alone.

A read-only idempotent call (``SideEffect.READ_ONLY`` and ``idempotent=True``) records no RUNNING
entry: the ledger gets one write, its outcome (``LedgerBackend.record_read``), which later calls
with its key replay. Nothing is lost if the host dies while it runs: no entry means a retry runs
it again, which is safe; and the runtime never asks the ledger before sending a read again (its
``core/_attempts.py`` asks only about an in-doubt write), it just retries. While such a call runs,
this process knows it from :class:`Operations` alone: a duplicate here waits for it as for any
call; GetOperation and CancelOperation on this host answer RUNNING (an entry made up from the
running call, never written) and CancelOperation stops it as it stops any call. Another host of a
pool does not know it: GetOperation there answers NOT_FOUND (or the key's earlier retryable
failure), and a duplicate there may run the read at the same time, which a read allows.

Why an async tool still runs as a task of its own, not inline in the RPC handler under
``asyncio.timeout``: gRPC cancels the handler's task when the caller goes away, so an inline tool
would get ``CancelledError`` at once, where today a write runs on to record its outcome and a read
first sees ``ctx.cancelled`` for a grace; and a tool that ignores its deadline's cancellation
would hold the answer, where today the caller hears "still_running" when the grace ends. The
task costs no ``asyncio.wait`` on the usual path (:meth:`Operations._settled_within`).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import enum
import logging
import sqlite3
import time

import pydantic

from agentrt.toolhost._context import ToolContext
from agentrt.toolhost._errors import ErrorCode, ToolError
from agentrt.toolhost._faults import crash_after_effect
from agentrt.toolhost._ledger_backend import LedgerBackend
from agentrt.toolhost._ledger_types import LedgerUnavailable, ReadCall
from agentrt.toolhost._outcome import Failure, Outcome
from agentrt.toolhost._sdk import Tool

__all__ = ["Operation", "Operations", "StopReason"]

_log = logging.getLogger(__name__)


class StopReason(enum.Enum):
    """Why the host asked a running tool to stop."""

    TIMEOUT = "timeout"
    CANCEL_REQUESTED = "cancel_requested"  # an explicit CancelOperation
    CALLER_VANISHED = "caller_vanished"  # the RPC was cancelled (read-only and idempotent tools only)
    SHUTDOWN = "shutdown"


# The host stopped the tool where it stood: whether its effect happened is not known.
EFFECT_UNKNOWN = {"effect": "unknown"}
# The host stopped the tool at its deadline: a typed timeout for the caller's counters (it adds
# nothing to what "effect" and "still_running" tell about the outcome).
DEADLINE_EXCEEDED = {"deadline_exceeded": True}


@dataclasses.dataclass(eq=False, kw_only=True)
class Operation:
    """One running call."""

    key: str
    tool: Tool
    args: pydantic.BaseModel
    ctx: ToolContext
    task: asyncio.Task[Outcome] | None = None
    stop_reason: StopReason | None = None
    # The future settle() waits on; _run() resolves it as its very last step, so the RPC
    # resumes one loop iteration after the tool ends (with its task done by then).
    settled: asyncio.Future[None] | None = None
    # A result larger than this (UTF-8 bytes of its JSON) is recorded and answered as
    # RESULT_TOO_LARGE instead of being sent; 0: no limit.
    max_result_bytes: int = 0
    # Set for a read-only idempotent call: it has no ledger entry until its outcome is recorded.
    read: ReadCall | None = None


class Operations:
    """The calls running in this host process, by tenant and idempotency key.

    Args:
        ledger: Where outcomes are recorded.
        counters: The host's counters.
        cancel_grace: Seconds a cancelled tool gets to stop on its own before it is cancelled hard.
    """

    def __init__(
        self, *, ledger: LedgerBackend, counters: collections.Counter[str], cancel_grace: float
    ) -> None:
        self._ledger = ledger
        self._counters = counters
        self._grace = cancel_grace
        self._running: dict[tuple[str, str], Operation] = {}
        self._stopping: set[asyncio.Task[None]] = set()  # hard cancels after an explicit cancel's grace

    def __len__(self) -> int:
        return len(self._running)

    def get(self, key: str, *, tenant: str = "") -> Operation | None:
        """Return the running call of a key in ``tenant``, if any."""
        return self._running.get((tenant, key))

    def start(
        self,
        *,
        key: str,
        tool: Tool,
        args: pydantic.BaseModel,
        ctx: ToolContext,
        max_result_bytes: int = 0,
        read: ReadCall | None = None,
    ) -> Operation:
        """Start a call whose RUNNING entry the ledger just recorded (in ``ctx.tenant``), or, with
        ``read``, a read-only idempotent call that has no entry (its outcome is recorded at its end).
        """
        op = Operation(key=key, tool=tool, args=args, ctx=ctx, max_result_bytes=max_result_bytes, read=read)
        self._running[(ctx.tenant, key)] = op
        op.task = asyncio.get_running_loop().create_task(self._run(op), name=f"tool {tool.name} {key}")
        return op

    async def _run(self, op: Operation) -> Outcome:
        try:
            try:
                result = await op.tool.invoke(op.args, op.ctx)
                outcome = _bounded(op, Tool.serialise_result(result))
                del result  # a large result is held once, as its JSON text, from here on
                crash_after_effect(op.tool.name)
            except asyncio.CancelledError:
                # Only the host cancels this task (see stop()); it is not the RPC's cancellation.
                outcome = self._stopped_outcome(op)
            except ToolError as exc:
                outcome = Outcome(failure=Failure.from_error(exc))
            except Exception as exc:
                _log.warning("tool %s raised (key %s)", op.tool.name, op.key, exc_info=True)
                # Type and message only: a traceback would leak the plugin's internals.
                outcome = Outcome.error(ErrorCode.PERMANENT, f"{type(exc).__name__}: {exc}")
            self._record(op, outcome)
            return outcome
        finally:
            if self._running.get((op.ctx.tenant, op.key)) is op:
                del self._running[(op.ctx.tenant, op.key)]
            _wake(op.settled)

    @staticmethod
    def _stopped_outcome(op: Operation) -> Outcome:
        """The outcome of a tool the host cancelled where it stood (never the tool's own word)."""
        match op.stop_reason:
            case StopReason.TIMEOUT:
                return Outcome.error(
                    ErrorCode.TRANSIENT,
                    "timeout: the call overran its deadline",
                    {**EFFECT_UNKNOWN, **DEADLINE_EXCEEDED},
                )
            case StopReason.CANCEL_REQUESTED:
                message = "cancelled on request"
            case StopReason.SHUTDOWN:
                message = "cancelled: the tool host shut down"
            case _:
                message = "cancelled: the caller went away"
        stopped = op.stop_reason.value if op.stop_reason is not None else "unknown"
        return Outcome.error(ErrorCode.CANCELLED, message, {**EFFECT_UNKNOWN, "stopped": stopped})

    def _record(self, op: Operation, outcome: Outcome) -> None:
        failure = outcome.failure
        self._counters["succeeded" if failure is None else f"failed_{failure.code.value.lower()}"] += 1
        if self._ledger.closed:
            # The host shut down while a sync tool kept running; the entry stays RUNNING (unknown),
            # or, for a read, absent (run again).
            _log.warning(
                "ledger closed before %s (key %s) finished; outcome not recorded", op.tool.name, op.key
            )
            return
        try:
            if op.read is not None:
                self._ledger.record_read(op.read, outcome)
            else:
                self._ledger.finish(op.key, outcome, tenant=op.ctx.tenant)
        except (sqlite3.Error, LedgerUnavailable):
            # The entry stays RUNNING, which a later call reads as "outcome unknown": the safe side.
            _log.exception("cannot record the outcome of %s (key %s)", op.tool.name, op.key)

    def stop(self, op: Operation, reason: StopReason) -> None:
        """Signal the tool to stop; async tools are also cancelled.

        A sync tool runs in a thread that cannot be interrupted: it only sees the
        signal, and its task ends (and records the real outcome) when it returns.
        """
        if op.stop_reason is None:
            op.stop_reason = reason
        op.ctx.cancelled.set()
        if op.tool.is_async and op.task is not None and not op.task.done():
            op.task.cancel()

    async def settle(self, op: Operation, *, budget: float, reply_within: float | None = None) -> Outcome:
        """Wait for a call's outcome on behalf of the RPC that started it.

        Args:
            op: The call.
            budget: Seconds until the call's deadline.
            reply_within: Seconds until the answer must be sent (the caller's deadline, less a
                margin), or None; bounds how long an overrunning tool gets to stop.

        Returns:
            The outcome; TRANSIENT "timeout" when the tool overran its deadline.

        Raises:
            asyncio.CancelledError: The RPC was cancelled; the tool got its signal and a grace period.
        """
        assert op.task is not None
        try:
            if await self._settled_within(op, budget):
                return op.task.result()
            self._counters["timeout"] += 1
            self.stop(op, StopReason.TIMEOUT)
            grace = self._grace
            if reply_within is not None:
                # Answer before the caller's deadline, or the caller gets no typed error at all.
                grace = min(grace, max(0.0, reply_within - budget))
            done, _ = await asyncio.wait({op.task}, timeout=grace)
            if done:
                return op.task.result()
            return Outcome.error(
                ErrorCode.TRANSIENT,
                "timeout: the call overran its deadline and has not stopped yet",
                {"still_running": True, **DEADLINE_EXCEEDED},
            )
        except asyncio.CancelledError:
            await self._on_caller_vanished(op)
            raise

    async def _settled_within(self, op: Operation, within: float) -> bool:
        """Wait up to ``within`` seconds for the call's task; True if it is done.

        ``asyncio.wait`` would do, at the price of a set, a done-callback and one more loop
        iteration per call; this waits on :attr:`Operation.settled`, which :meth:`_run` resolves.
        """
        task = op.task
        assert task is not None
        if task.done():
            return True
        loop = asyncio.get_running_loop()
        op.settled = settled = loop.create_future()
        # Ends by time.monotonic(), the clock of ToolContext.deadline: a loop's own clock (uvloop
        # caches it per iteration) may fire a timer early by that clock, and a tool woken by the
        # stop would see time left before its deadline.
        until = time.monotonic() + max(0.0, within)
        timers: list[asyncio.TimerHandle] = []

        def at_deadline() -> None:
            left = until - time.monotonic()
            if left > 0:
                timers.append(loop.call_later(left, at_deadline))
            else:
                _wake(settled)

        timers.append(loop.call_later(max(0.0, within), at_deadline))

        def on_done(_: object) -> None:
            # Only matters when _run() never ran its finally (a task cancelled before it started).
            _wake(settled)

        task.add_done_callback(on_done)
        try:
            await settled
        finally:
            for timer in timers:
                timer.cancel()
            task.remove_done_callback(on_done)
            op.settled = None
        # Not done means the timer woke us; _run() wakes us only as its task ends.
        return task.done()

    async def _on_caller_vanished(self, op: Operation) -> None:
        """The RPC was cancelled: maybe on purpose, maybe its caller died. A write goes on."""
        assert op.task is not None
        if op.task.done():
            return
        if not op.tool.rerun_after_crash:
            # Stopping it now could leave its effect half done or unknown; finishing it records the
            # truth in the ledger, where the caller's successor looks (GetOperation).
            self._counters["caller_vanished_write_kept"] += 1
            _log.info("the caller of %s (key %s) went away; the write runs to its end", op.tool.name, op.key)
            return
        self._counters["cancelled"] += 1
        await self._signal_then_cancel([op], grace=self._grace, reason=StopReason.CALLER_VANISHED)

    def cancel(self, key: str, *, tenant: str = "") -> bool:
        """An explicit cancel of a running call (CancelOperation): signal it now, and cancel an
        async tool still running after the grace. Returns False when no such call is running here.
        """
        op = self.get(key, tenant=tenant)
        if op is None or op.task is None or op.task.done():
            return False
        self._counters["cancel_requested"] += 1
        task = asyncio.get_running_loop().create_task(
            self._signal_then_cancel([op], grace=self._grace, reason=StopReason.CANCEL_REQUESTED),
            name=f"cancel {op.tool.name} {key}",
        )
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)
        return True

    async def _signal_then_cancel(self, ops: list[Operation], *, grace: float, reason: StopReason) -> None:
        # First only the signal, so tools can stop cleanly (and say so); then cancel the async ones.
        for op in ops:
            if op.stop_reason is None:
                op.stop_reason = reason
            op.ctx.cancelled.set()
        tasks = {op.task for op in ops if op.task is not None and not op.task.done()}
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=grace)
        if pending:
            for op in ops:
                self.stop(op, reason)
            await asyncio.wait(pending, timeout=grace)

    async def wait(self, op: Operation, *, within: float) -> bool:
        """Wait for another RPC's call with the same key to finish; True if it did ``within`` seconds."""
        assert op.task is not None
        done, _ = await asyncio.wait({op.task}, timeout=max(0.0, within))
        return bool(done)

    async def drain(self, *, within: float) -> None:
        """At shutdown: signal every running call, cancel the async ones still running after
        ``within`` seconds, and wait up to ``within`` more for them to record their outcome."""
        await self._signal_then_cancel(list(self._running.values()), grace=within, reason=StopReason.SHUTDOWN)
        for task in list(self._stopping):
            task.cancel()


def _bounded(op: Operation, result_json: str) -> Outcome:
    """The result, or RESULT_TOO_LARGE past the call's maximum (the effect may have happened)."""
    limit = op.max_result_bytes
    # Characters are one to four bytes: most results are decided from their length alone.
    if not limit or len(result_json) * 4 <= limit:
        return Outcome.success(result_json)
    # ASCII: the length is the size. Otherwise encode (one copy) only when the length alone cannot
    # decide; past the limit in characters, the length is a lower bound and no copy is made.
    ascii_only = result_json.isascii()
    exact = ascii_only or len(result_json) <= limit
    size = len(result_json) if ascii_only or not exact else len(result_json.encode())
    if size <= limit:
        return Outcome.success(result_json)
    _log.warning("tool %s returned a result over %d bytes (key %s)", op.tool.name, limit, op.key)
    return Outcome.error(
        ErrorCode.RESULT_TOO_LARGE,
        f"the result is {'' if exact else 'at least '}{size} bytes; the maximum is {limit}",
        {"max_result_bytes": limit},
    )


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)
