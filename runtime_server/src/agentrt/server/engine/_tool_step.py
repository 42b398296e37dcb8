"""Tool calls of a run: send, retry, recover, reconcile (R5.3, R6.3 to R6.6).

A write tool (not read-only, not idempotent) is never sent twice on a guess: a
call found started by an earlier owner is first looked up in its tool host's
ledger by idempotency key, and a call cut off in flight whose outcome the
ledger cannot tell becomes UNKNOWN_OUTCOME until a query or a person settles it.
So does a write the host reports still running past its deadline, or stopped
where it stood ("effect unknown"): it is never recorded failed, never re-sent.
A ledger's TRANSIENT or CANCELLED in the tool's own words ("did not complete")
means the write is sent again under its key, unless the run was cancelled.

Cancelling a run with a write in flight (R6.6): the cancel is committed at once
(cancel.requested), the tool host is asked to stop the call explicitly
(CancelOperation: a crash or a dropped connection never stops a write), and the
write's RPC stays open, so its answer, the real outcome, is recorded: a result if
the effect landed, CANCELLED if the tool stopped first, UNKNOWN_OUTCOME (then the
ledger) if the host cannot tell. Cutting the RPC instead would only turn a
knowable outcome into an unknown one. Reads and model calls are cut at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from typing import Any

from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.server.core import (
    CallState,
    CancelRequested,
    Event,
    IntentDuplicate,
    LeaseLost,
    PayloadRef,
    Phase,
    RetryScheduled,
    TimeoutLayer,
    ToolCompleted,
    ToolError,
    ToolErrorCode,
    ToolFailed,
    ToolOutcomeUnknown,
    ToolStarted,
    VariablesSet,
    end_events,
    loads_bounded,
    nesting_depth,
    not_allowed_error,
    reconcile_delay_ms,
    retry_fits,
    rfc3339,
    step_deadline_s,
    variables_json,
    variables_requested,
)
from agentrt.server.engine._approval_step import recheck_approved
from agentrt.server.engine._cleanup_step import register_child_run, register_cleanups
from agentrt.server.engine._control import AGENT_TOOL_PREFIX, Cancelled
from agentrt.server.engine._payload_step import bound_tool_outcome
from agentrt.server.engine._ports import LedgerAnswer, StartRequest
from agentrt.server.engine._run import RunContext
from agentrt.server.store import tool_error_from_json
from agentrt.server.tools import ToolOutcome


def is_write(spec: tool_pb2.ToolSpec | None) -> bool:
    """Writes are retried only through their key or after a query (invariant 3)."""
    return spec is None or (spec.side_effect != tool_pb2.SIDE_EFFECT_READ_ONLY and not spec.idempotent)


def did_not_complete(outcome: ToolOutcome) -> bool:
    """A failure in the tool's own words that leaves nothing done: the same key may run it again.

    Never true of an outcome the host is unsure of (``in_doubt``): a tool the host stopped where
    it stood, or one that is still running.
    """
    code = (outcome.error or {}).get("code", "")
    return not outcome.in_doubt and code in ("TOOL_ERROR_CODE_TRANSIENT", "TOOL_ERROR_CODE_CANCELLED")


class ToolStep:
    """The tool side of a run's steps."""

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self._sent: dict[str, tuple[int, int]] = {}  # call id -> (sent, answered) ms of its last attempt
        # call id -> when its step (first attempt here) began: held per ownership, so a new owner
        # gives an inherited call a fresh step budget (the run's deadline still bounds it).
        self._step_began: dict[str, float] = {}

    def _spec_timeout(self, spec: tool_pb2.ToolSpec | None) -> float:
        seconds = spec.default_timeout.ToTimedelta().total_seconds() if spec is not None else 0.0
        return seconds or self.ctx.settings.tool_timeout_s

    def _step_deadline(self, call: CallState) -> float:
        """When this call, all its attempts and backoff included, must end (``[timeouts] tool_step_s``)."""
        began = self._step_began.setdefault(call.call_id, self.ctx.ports.clock())
        return step_deadline_s(began_s=began, step_s=self.ctx.settings.timeouts.tool_step_s)

    def _step_timeout(self, call: CallState, last: dict[str, Any] | None = None) -> ToolOutcome:
        """The step layer fired: the call ends failed, saying so (never a write in doubt: see callers)."""
        limit = self.ctx.settings.timeouts.tool_step_s
        message = f"step_timeout: {call.tool} with its retries did not finish within tool_step_s={limit:g}s"
        if last:
            message += f" (last attempt: {last.get('message', '')})"
        return ToolOutcome.failure("TRANSIENT", message)

    # -- one call -----------------------------------------------------------------------------------

    def _refused(self, call: CallState) -> bool:
        """Defence in depth behind the decider: a tool the active agent lacks is never sent (R10.2)."""
        policy = self.ctx.policy
        if policy.allows(call.tool):
            return False
        error = not_allowed_error(call.tool, policy.agent_name)
        self.record(call, ToolOutcome.failure("NOT_ALLOWED", error.message))
        return True

    async def run_call(self, call: CallState) -> None:
        """Send a started call (or, for an inherited write, query first) and record what happened."""
        d, ports = self.ctx, self.ctx.ports
        if self._refused(call):
            return
        if call.tool.startswith(AGENT_TOOL_PREFIX):
            self.record(call, await bound_tool_outcome(d, await self._child_run(call)))
            return
        spec = ports.tools.spec(call.tool)
        write = is_write(spec)
        if write and call.call_id not in d.started_here:
            if not await self._resume_inherited(call):
                return
            never_sent = True  # sent again now, under the same key
        else:
            never_sent = call.attempts == 1
        if call.approved and never_sent and await self._vetoed(call):
            return
        step_deadline = self._step_deadline(call)
        budget = d.budget(self._spec_timeout(spec), step_deadline)
        timeout = budget.timeout_s
        if timeout <= 0 and budget.layer is TimeoutLayer.STEP:
            self.record(call, self._step_timeout(call))
            return
        if timeout <= 0:
            d.add(*end_events(d.state, Phase.EXPIRED, "deadline_exceeded", retryable=True))
            return
        d.check_lease()
        call_deadline_ms = ports.now_ms() + math.ceil(timeout * 1000)
        started = ports.clock()
        try:
            if write:
                outcome = await self._send_write(call, timeout_s=timeout)
            else:
                outcome = await d.io(lambda: self._send(call, timeout_s=timeout))
        except Cancelled:
            # A read cut in flight, or a write the cancel reached before it was sent.
            settled = await self._query(call) if write else None
            if settled is None:
                outcome = ToolOutcome.failure("CANCELLED", "cancelled in flight")
            elif isinstance(settled, ToolOutcome) and not settled.in_doubt:
                outcome = settled  # an earlier attempt's recorded outcome
            elif settled == "not_found":
                outcome = ToolOutcome.failure("CANCELLED", "cancelled before it was sent")
            else:
                self._outcome_unknown(call, "cancelled while an earlier attempt was in flight", 0)
                return
        ports.faults.hit("tool_response_received")
        message = (outcome.error or {}).get("message", "")
        timed_out = outcome.error is not None and ("deadline" in message or "timeout" in message)
        if timed_out:
            ports.counters.inc("timeout_count")
        if outcome.in_doubt and write:
            # The request may have reached the host, or the host cannot tell what the tool did:
            # learn what happened before any retry (R5.3); a still-running write is never failed.
            settled = await self._query(call)
            if isinstance(settled, ToolOutcome) and not settled.in_doubt:
                outcome = settled
            elif settled != "not_found":
                self._outcome_unknown(
                    call, outcome.error["message"] if outcome.error else "", call_deadline_ms
                )
                return
        error = outcome.error or {}
        retryable = error.get("code") == "TOOL_ERROR_CODE_TRANSIENT" and d.handle.cancel_reason is None
        # The outcome as settled (a ledger's answer replaces a timed-out write's): did the step cut it?
        final = str(error.get("message", ""))
        step_fired = budget.layer is TimeoutLayer.STEP and ("deadline" in final or "timeout" in final)
        if retryable and not step_fired:
            scheduled = self._schedule_retry(
                call, error, expected_call_s=ports.clock() - started, step_deadline=step_deadline
            )
            if scheduled is True:
                return
            step_fired = scheduled is TimeoutLayer.STEP
        if step_fired:
            outcome = self._step_timeout(call, error)
        self._step_began.pop(call.call_id, None)
        self.record(call, await bound_tool_outcome(d, outcome))

    async def _vetoed(self, call: CallState) -> bool:
        """Re-check an approved call before it first reaches its tool host; True when vetoed (recorded)."""
        try:
            veto = await recheck_approved(self.ctx, call)
        except Cancelled:
            veto = ToolError(ToolErrorCode.CANCELLED, "cancelled before it ran")
        if veto is None:
            return False
        self.ctx.add(ToolFailed(step=call.step, call_id=call.call_id, tool=call.tool, error=veto))
        return True

    async def _resume_inherited(self, call: CallState) -> bool:
        """A write an earlier owner started: its ledger decides. True when it is to be sent now."""
        d = self.ctx
        found = await self._query(call)
        cancelled = d.handle.cancel_reason is not None
        if isinstance(found, ToolOutcome) and not found.in_doubt:
            if not (did_not_complete(found) and not cancelled):
                self.record(call, await bound_tool_outcome(d, found))
                return False
            # The tool's own word that it did not complete (never a crash read as a cancel).
        elif found != "not_found" or cancelled:
            # Running, unreachable, stopped where it stood; or never seen in a cancelled run, whose
            # earlier request may still be on its way: the ledger is asked again later.
            self._outcome_unknown(call, "recovered call: its tool host could not say what happened", 0)
            return False
        # Never reached the tool host's ledger, or provably did not complete: send it, same key.
        self._restart(call)
        await d.flush()
        return True

    async def _send_write(self, call: CallState, *, timeout_s: float) -> ToolOutcome:
        """Send a write; a cancel request does not cut it (see the module's doc).

        Raises:
            Cancelled: the cancel came before the write was sent; it is not sent.
        """
        d, handle = self.ctx, self.ctx.handle
        if handle.cancel_reason is not None:
            raise Cancelled()
        sending = asyncio.ensure_future(self._send(call, timeout_s=timeout_s))
        try:
            if await d.cancel_arrives_before(sending):
                await self._commit_cancel_now()
                await d.ports.tools.cancel(
                    call.tool,
                    call.arguments_json,
                    metadata=d.call_metadata(call),
                    reason=handle.cancel_reason or "cancelled",
                    timeout_s=d.settings.query_timeout_s,
                )
            return await sending
        finally:
            # Only on shutdown or a lost lease is it still running: cut the RPC, the host finishes the write.
            sending.cancel()

    async def _commit_cancel_now(self) -> None:
        """Commit cancel.requested while the write is still in flight, not once it ends (R6.6)."""
        d = self.ctx
        if d.state.phase is Phase.TOOL_STEP:
            d.add(
                CancelRequested(reason=d.handle.cancel_reason or "cancelled", requested_by=d.handle.cancel_by)
            )
            await d.flush()

    async def _send(self, call: CallState, *, timeout_s: float) -> ToolOutcome:
        ctx, ports = self.ctx, self.ctx.ports
        ports.faults.hit("tool_before_send")
        sending = asyncio.ensure_future(
            ports.tools.invoke(
                call.tool, call.arguments_json, metadata=ctx.call_metadata(call), timeout_s=timeout_s
            )
        )
        sent_ms = ports.now_ms()
        if ports.faults.armed:
            # Let the request leave before crashing "between sent and recorded".
            await asyncio.wait({sending}, timeout=0.05)
            ports.faults.hit("tool_request_sent")
        outcome = await sending
        self._sent[call.call_id] = (sent_ms, ports.now_ms())
        return outcome

    def _call_record(self, call: CallState, outcome: ToolOutcome) -> dict[str, Any]:
        """When the call's last attempt was sent and answered, and by which host (S004 §12); a result
        learned from a ledger query (or never sent) has no send time."""
        sent = self._sent.pop(call.call_id, None)
        return {
            "start_time": rfc3339(sent[0]) if sent is not None else None,
            "end_time": rfc3339(sent[1] if sent is not None else self.ctx.ports.now_ms()),
            "host": outcome.host,
        }

    def _schedule_retry(
        self, call: CallState, error: dict[str, Any], *, expected_call_s: float, step_deadline: float
    ) -> bool | TimeoutLayer:
        """True when a retry is scheduled; else False, or STEP when only the step's deadline stops it."""
        d, ports = self.ctx, self.ctx.ports
        delay = d.backoff(call.attempts)
        now = ports.clock()
        fits_run = retry_fits(
            now_s=now, delay_s=delay, expected_call_s=expected_call_s, deadline_s=d.deadline_s
        )
        fits = retry_fits(
            now_s=now,
            delay_s=delay,
            expected_call_s=expected_call_s,
            deadline_s=d.deadline_s,
            step_deadline_s=step_deadline,
        )
        if call.attempts >= d.settings.tool_attempts or not fits:
            ports.counters.inc("retry_exhausted_count")
            attempts_left = call.attempts < d.settings.tool_attempts
            return TimeoutLayer.STEP if attempts_left and fits_run else False
        ports.counters.inc("retry_count")
        due_ms = ports.now_ms() + math.ceil(delay * 1000)
        d.add(self._retry_event(call, call.attempts + 1, delay, error, due_ms))
        return True

    @staticmethod
    def _retry_event(
        call: CallState, attempt: int, delay: float, error: dict[str, Any], due_ms: int
    ) -> Event:
        return RetryScheduled(
            call_id=call.call_id,
            attempt=attempt,
            delay=f"{delay:.3f}s",
            reason=f"{error.get('code', '')}: {error.get('message', '')}"[:400],
            due_time=rfc3339(due_ms),
        )

    def _attempt_event(self, call: CallState, attempt: int) -> Event:
        """A new attempt of the same call, same key; budgets count the call once."""
        usage = self.ctx.state.usage.totals()
        return ToolStarted(
            step=call.step,
            call_id=call.call_id,
            tool=call.tool,
            arguments_json=call.arguments_json,
            idempotency_key=call.idempotency_key,
            attempt=attempt,
            usage_before=usage,
            usage_after=usage,
        )

    def _restart(self, call: CallState) -> None:
        self.ctx.add(self._attempt_event(call, call.attempts + 1))
        self.ctx.started_here.add(call.call_id)

    def record(self, call: CallState, outcome: ToolOutcome) -> None:
        self._check_fence(outcome)
        self._add_result(call, outcome)
        self._end_if_fatal(call, outcome)

    def _add_result(self, call: CallState, outcome: ToolOutcome) -> None:
        """The result event, and the run variables the result sets (S004 §1.2), if any."""
        d = self.ctx
        result = self._result_event(call, outcome)
        d.add(result)
        # A large result's view (or its refusal) lacks the members addressed to the runtime: they
        # were kept aside. A resource the call made is cleaned up even if the model never saw it.
        text = outcome.runtime_json if outcome.runtime_json is not None else outcome.result_json
        deduplicated = isinstance(result, ToolCompleted) and result.deduplicated
        if text and not deduplicated:  # a duplicate's resources are the first call's, not this run's
            register_cleanups(d, call, text, outcome.host)
        if not isinstance(result, ToolCompleted) or (result.truncated and outcome.runtime_json is None):
            return  # the variables of a result the run does not keep as a success are not set
        change = variables_requested(text or "", d.state.variables)
        if change is None:
            return
        d.add(
            VariablesSet(
                step=call.step,
                call_id=call.call_id,
                tool=call.tool,
                variables=dict(change.variables),
                removed=change.removed,
                refused_reason=change.refused_reason,
            )
        )
        if change.refused_reason:
            d.ports.counters.inc("variables_refused_count")
        else:
            d.pending_values["variables"] = variables_json(d.state.variables)

    def _check_fence(self, outcome: ToolOutcome) -> None:
        if (outcome.error or {}).get("code") == "TOOL_ERROR_CODE_FENCED":
            raise LeaseLost(
                f"tool host refused run {self.ctx.run_id}'s fencing token {self.ctx.handle.generation}"
            )

    def _result_event(self, call: CallState, outcome: ToolOutcome) -> Event:
        if outcome.replayed or outcome.deduplicated:
            self.ctx.ports.counters.inc("duplicate_suppressed_count")
        record = self._call_record(call, outcome)
        if outcome.error is None and (result_error := self._result_error(outcome.result_json or "")):
            return ToolFailed(
                step=call.step, call_id=call.call_id, tool=call.tool, error=result_error, **record
            )
        if outcome.error is None:
            ref = outcome.result_ref  # stored as a payload: result_json is what the model saw
            return ToolCompleted(
                **record,
                step=call.step,
                call_id=call.call_id,
                tool=call.tool,
                result_json=outcome.result_json or "",
                replayed=outcome.replayed,
                result_ref=PayloadRef.from_json(ref) if ref is not None else None,
                truncated=outcome.truncated if ref is not None else False,
                deduplicated=outcome.deduplicated,
                duplicate_of=_duplicate_of(outcome.duplicate_of) if outcome.deduplicated else None,
            )
        error = tool_error_from_json(outcome.error)
        return ToolFailed(step=call.step, call_id=call.call_id, tool=call.tool, error=error, **record)

    def _result_error(self, result_json: str) -> ToolError | None:
        """A result nesting past the bounds is a tool error: nothing downstream must recurse into it."""
        limit = self.ctx.policy.argument_limits.max_depth
        if nesting_depth(result_json, stop_at=limit) <= limit:
            return None
        message = f"the tool ran, but its result was refused: JSON nests deeper than {limit} levels"
        return ToolError(ToolErrorCode.PERMANENT, message)

    def _end_if_fatal(self, call: CallState, outcome: ToolOutcome) -> None:
        d = self.ctx
        code = (outcome.error or {}).get("code", "")
        message = (outcome.error or {}).get("message", "")
        if code == "TOOL_ERROR_CODE_UNAUTHORIZED":
            d.add(*end_events(d.state, Phase.FAILED, f"tool_unauthorized:{call.tool}", message=message))
        elif code == "TOOL_ERROR_CODE_KEY_CONFLICT":
            d.add(*end_events(d.state, Phase.FAILED, "idempotency_conflict", message=message))

    # -- parallel read-only calls -------------------------------------------------------------------

    async def run_batch(self, calls: tuple[CallState, ...]) -> None:
        """Send concurrency-safe, read-only calls at once; their events enter the log in call order.

        Retries of a batch call wait in memory (a crash re-sends a read-only call, which is safe);
        a cancel keeps every result that had arrived and marks the rest cancelled.
        """
        d = self.ctx
        calls = tuple(c for c in calls if not self._refused(c))
        if not calls:
            return
        d.check_lease()
        settled: dict[str, list[tuple[Event | None, ToolOutcome]]] = {c.call_id: [] for c in calls}
        with contextlib.suppress(Cancelled):  # results that arrived before the cancel are kept below
            await d.io(lambda: asyncio.gather(*(self._settle_read(c, settled[c.call_id]) for c in calls)))
        for call in calls:
            steps = settled[call.call_id]
            if not steps or steps[-1][0] is not None:  # no outcome yet: cut off by the cancel
                steps.append((None, ToolOutcome.failure("CANCELLED", "cancelled in flight")))
            steps[-1] = (None, await bound_tool_outcome(d, steps[-1][1]))
            for retry_event, outcome in steps:
                if retry_event is not None:
                    d.add(retry_event)
                    continue
                self._check_fence(outcome)
                self._add_result(call, outcome)
        for call in calls:
            outcome = settled[call.call_id][-1][1]
            self._end_if_fatal(call, outcome)

    async def _settle_read(self, call: CallState, steps: list[tuple[Event | None, ToolOutcome]]) -> None:
        d, ports = self.ctx, self.ctx.ports
        spec = ports.tools.spec(call.tool)
        attempt = call.attempts
        step_deadline = self._step_deadline(call)
        self._step_began.pop(call.call_id, None)  # the whole step runs inside this method
        while True:
            budget = d.budget(self._spec_timeout(spec), step_deadline)
            if budget.timeout_s <= 0:
                if budget.layer is TimeoutLayer.STEP:
                    steps.append((None, self._step_timeout(call)))
                else:
                    steps.append((None, ToolOutcome.failure("TRANSIENT", "the run's deadline left no time")))
                return
            began = ports.clock()
            outcome = await self._send(call, timeout_s=budget.timeout_s)
            error = outcome.error or {}
            message = str(error.get("message", ""))
            if budget.layer is TimeoutLayer.STEP and ("deadline" in message or "timeout" in message):
                steps.append((None, self._step_timeout(call, error)))
                return
            if error.get("code") == "TOOL_ERROR_CODE_TRANSIENT" and attempt < d.settings.tool_attempts:
                delay = d.backoff(attempt)
                expected, now = ports.clock() - began, ports.clock()
                fits_run = retry_fits(
                    now_s=now, delay_s=delay, expected_call_s=expected, deadline_s=d.deadline_s
                )
                fits = fits_run and retry_fits(
                    now_s=now,
                    delay_s=delay,
                    expected_call_s=expected,
                    deadline_s=d.deadline_s,
                    step_deadline_s=step_deadline,
                )
                if fits:
                    ports.counters.inc("retry_count")
                    attempt += 1
                    due_ms = ports.now_ms() + math.ceil(delay * 1000)
                    steps.append((self._retry_event(call, attempt, delay, error, due_ms), outcome))
                    steps.append((self._attempt_event(call, attempt), outcome))
                    await d.ports.sleep(delay)
                    continue
                ports.counters.inc("retry_exhausted_count")
                if fits_run:  # only the step's deadline stops the retry
                    steps.append((None, self._step_timeout(call, error)))
                    return
            steps.append((None, outcome))
            return

    def _outcome_unknown(self, call: CallState, reason: str, call_deadline_ms: int) -> None:
        self.ctx.ports.counters.inc("unknown_result_count")
        unknown = ToolOutcomeUnknown(
            step=call.step,
            call_id=call.call_id,
            tool=call.tool,
            idempotency_key=call.idempotency_key,
            reason=reason,
            call_deadline=rfc3339(call_deadline_ms) if call_deadline_ms else None,
            unknown_time=rfc3339(self.ctx.ports.now_ms()),
        )
        self.ctx.add(unknown)

    # -- agents as tools ----------------------------------------------------------------------------

    async def _child_run(self, call: CallState) -> ToolOutcome:
        """Run another agent as a child run and return its final answer (R9.1).

        The child's deadline is the parent's remaining time; its request key is the call's
        idempotency key, so a recovered parent re-attaches to the same child instead of starting
        another. Cancelling the parent cancels the child.
        """
        d, ports = self.ctx, self.ctx.ports
        target = call.tool.removeprefix(AGENT_TOOL_PREFIX)
        if target not in d.agent.config.agent_tools or target not in d.agent.peers:
            return ToolOutcome.failure("UNKNOWN_TOOL", f"agent {target!r} is not available to {d.agent.name}")
        try:
            question = str(loads_bounded(call.arguments_json or "{}").get("input", ""))
        except (ValueError, AttributeError):
            question = ""
        if not question.strip():
            return ToolOutcome.failure("INVALID_INPUT", "an agent tool needs a non-empty 'input'")
        remaining = d.deadline_s - ports.clock() - d.settings.call_reserve_s
        if remaining <= 0:
            return ToolOutcome.failure("TRANSIENT", "no time left for a child run")
        child_agent = d.agent.switch(target)
        request = StartRequest(
            tenant_id=d.tenant_id,
            agent=child_agent,
            input=question,
            budget_overrides={"timeout_s": min(child_agent.config.budgets.timeout_s, remaining)},
            request_key=f"child:{call.idempotency_key}",
            metadata={"parent_run_id": d.run_id, "parent_call_id": call.call_id},
            created_by=f"run:{d.run_id}",
        )
        child_id = await ports.children.start(request)
        if register_child_run(d, call, child_id):
            await d.flush()  # the parent's end cancels a child it still has (S002 §8)
        try:
            ended = await d.io(lambda: ports.children.wait_for_end(child_id))
        except Cancelled:
            await ports.children.cancel(
                child_id,
                tenant_id=d.tenant_id,
                reason=f"parent run {d.run_id} cancelled",
                requested_by=f"run:{d.run_id}",
            )
            return ToolOutcome.failure("CANCELLED", f"cancelled; child run {child_id} was cancelled too")
        if ended.phase == Phase.COMPLETED.value:
            return ToolOutcome(json.dumps({"run_id": ended.run_id, "output": ended.output}), None)
        return ToolOutcome.failure(
            "PERMANENT", f"child run {ended.run_id} ended {ended.phase}: {ended.reason}"
        )

    # -- learning outcomes --------------------------------------------------------------------------

    async def _query(self, call: CallState) -> LedgerAnswer:
        """The ledger's word on a call: an outcome, "not_found", or "unknown" (running / unreachable)."""
        ctx = self.ctx
        return await ctx.ports.tools.query(
            call.tool,
            call.arguments_json,
            metadata=ctx.call_metadata(call),
            timeout_s=ctx.settings.query_timeout_s,
        )

    async def reconcile(self, call: CallState) -> None:
        """The run is in UNKNOWN_OUTCOME: ask again; park with backoff while nobody can tell."""
        d, ports = self.ctx, self.ctx.ports
        found = await self._query(call)
        if isinstance(found, ToolOutcome) and not found.in_doubt:
            if did_not_complete(found) and d.handle.cancel_reason is None:
                self._restart(call)  # the ledger says it did not complete: safe to send again, same key
            else:
                self.record(call, await bound_tool_outcome(d, found))
            return
        now_ms = ports.now_ms()
        if found == "not_found":
            if d.handle.cancel_reason is None:
                self._restart(call)
                return
            settled_ms = call.call_deadline_ms or int(d.deadline_s * 1000)
            if now_ms > settled_ms:
                self.record(call, ToolOutcome.failure("CANCELLED", "the tool host never ran the call"))
                return
            await d.park(settled_ms + 1)
            return
        await d.park(now_ms + self._reconcile_delay_ms())

    def _reconcile_delay_ms(self) -> int:
        """The next query's delay; the attempt count is persisted with the park, so it keeps growing."""
        d = self.ctx
        d.reconcile_attempts += 1
        return reconcile_delay_ms(
            attempt=d.reconcile_attempts,
            escalated=d.state.escalation is not None,
            policy=d.waits,
            rand=d.ports.rand(),
        )


def _duplicate_of(first: dict[str, Any] | None) -> IntentDuplicate:
    """The earlier call, from the proto3 JSON of the tool host's ``IntentDuplicate``."""
    first = first or {}
    return IntentDuplicate(
        intent_key=str(first.get("intent_key", "")),
        idempotency_key=str(first.get("idempotency_key", "")),
        run_id=str(first.get("run_id", "")),
        call_id=str(first.get("call_id", "")),
        first_time=first.get("first_time"),
    )
