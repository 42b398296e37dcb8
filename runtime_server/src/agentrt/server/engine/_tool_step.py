"""Tool calls of a run: carry out what the core's verdict says of each attempt (R5.3, R6.3 to R6.6).

What an outcome means (retry, ask the ledger, unknown, step timeout, fail, record) is decided by
``core.attempts`` from the router's typed facts; this module sends, asks, sleeps and records.

A write tool (not read-only, not idempotent) is never sent twice on a guess: a call found
started by an earlier owner is first looked up in its tool host's ledger by idempotency key, and
a call cut off in flight whose outcome the ledger cannot tell becomes UNKNOWN_OUTCOME until a
query or a person settles it. So does a write the host reports still running past its deadline,
or stopped where it stood ("effect unknown"): it is never recorded failed, never re-sent.

Cancelling a run with a write in flight (R6.6): the cancel is committed at once
(cancel.requested), the tool host is asked to stop the call explicitly (CancelOperation: a crash
or a dropped connection never stops a write), and the write's answer, the real outcome, is waited
for up to ``[timeouts] cancel_wait_s``: a result if the effect landed, CANCELLED if the tool
stopped first, else its ledger decides. A cancelled run ends within that bound whatever the write
does (§11.11): a write nobody can tell is listed unknown on its end, for a person to settle.
Reads and model calls are cut at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import uuid
from functools import partial
from typing import Any

from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.server.core import (
    CallState,
    CancelRequested,
    Event,
    IntentDuplicate,
    LeaseLost,
    LedgerWord,
    PayloadRef,
    Phase,
    RetryScheduled,
    ToolCompleted,
    ToolError,
    ToolErrorCode,
    ToolFailed,
    ToolOutcome,
    ToolOutcomeUnknown,
    ToolStarted,
    VariablesSet,
    attempts,
    end_events,
    loads_bounded,
    nesting_depth,
    not_allowed_error,
    reconcile_delay_ms,
    rfc3339,
    step_deadline_s,
    unauthorized_pause,
    variables_json,
    variables_requested,
)
from agentrt.server.engine._approval_step import recheck_approved
from agentrt.server.engine._cleanup_step import register_child_run, register_cleanups
from agentrt.server.engine._control import AGENT_TOOL_PREFIX, Cancelled
from agentrt.server.engine._payload_step import bound_tool_outcome
from agentrt.server.engine._pending_tools import learn_tool_of_started_call
from agentrt.server.engine._ports import StartRequest
from agentrt.server.engine._run import RunContext
from agentrt.server.store import RowUpdate
from agentrt.server.telemetry import decision, logs_call, span_event, tool_labels, traced_tool

# The settled verdicts of a recorded outcome, and those that end or retry it.
_Settled = attempts.Fenced | attempts.Fail | attempts.Pause | attempts.Done


def is_write(spec: tool_pb2.ToolSpec | None) -> bool:
    """Writes are retried only through their key or after a query (invariant 3)."""
    return spec is None or (spec.side_effect != tool_pb2.SIDE_EFFECT_READ_ONLY and not spec.idempotent)


class ToolStep:
    """The tool side of a run's steps."""

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self._sent: dict[str, tuple[int, int]] = {}  # call id -> (sent, answered) ms of its last attempt
        # call id -> when its step (first attempt here) began: held per ownership, so a new owner
        # gives an inherited call a fresh step budget (the run's deadline still bounds it).
        self._step_began: dict[str, float] = {}

    # -- one call -----------------------------------------------------------------------------------

    @logs_call
    async def run_call(self, call: CallState) -> None:
        """Send a started call (an inherited write: its ledger first) and carry out what it meant."""
        ctx = self.ctx
        if self._refused(call):
            return
        if call.tool.startswith(AGENT_TOOL_PREFIX):
            self.record(call, await bound_tool_outcome(ctx, await self._child_run(call)))
            return
        await learn_tool_of_started_call(ctx, call)  # recovered while its tool host is not up yet
        write = is_write(ctx.ports.tools.spec(call.tool))
        inherited = write and call.call_id not in ctx.started_here
        if inherited and not await self._resume_inherited(call):
            return
        first_send = inherited or call.attempts == 1
        if call.approved and first_send and await self._vetoed(call):
            return
        plan = self._plan(call)
        if not isinstance(plan, attempts.Send):
            self._out_of_time(call, plan)
            return
        ctx.check_lease()
        began, call_deadline_ms = ctx.ports.clock(), ctx.ports.now_ms() + math.ceil(plan.timeout_s * 1000)
        outcome = await self._attempt(call, write=write, timeout_s=plan.timeout_s)
        if outcome is None:
            return
        ctx.ports.faults.hit("tool_response_received")
        verdict = self._verdict(call, outcome, write=write, layer=plan.layer, began=began)
        if isinstance(verdict, attempts.AskLedger):
            settled = await self._settle_doubt(call, outcome, call_deadline_ms)
            if settled is None:
                return
            outcome = settled
            verdict = self._verdict(
                call, outcome, write=write, layer=plan.layer, began=began, reconciled=True
            )
        await self._carry_out(call, outcome, verdict)

    async def _attempt(self, call: CallState, *, write: bool, timeout_s: float) -> ToolOutcome | None:
        """One attempt's outcome; None when a cancel met a write whose outcome nobody can tell (recorded)."""
        try:
            if write:
                return await self._send_write(call, timeout_s=timeout_s)
            return await self.ctx.io(lambda: self._send(call, timeout_s=timeout_s))
        except Cancelled:
            if not write:
                return ToolOutcome.failure("CANCELLED", "cancelled in flight")
        # The cancel came before this write was sent; an earlier attempt may still be in flight.
        word = await self._query(call)
        match attempts.ledger_after_doubt(word):
            case attempts.Adopt():
                assert isinstance(word, ToolOutcome)
                return word
            case attempts.Done():
                return ToolOutcome.failure("CANCELLED", "cancelled before it was sent", never_sent=True)
        self._outcome_unknown(call, "cancelled while an earlier attempt was in flight", 0)
        return None

    async def _settle_doubt(
        self, call: CallState, outcome: ToolOutcome, call_deadline_ms: int
    ) -> ToolOutcome | None:
        """A write that may have run: its ledger's outcome, the attempt's own, or None (now unknown)."""
        word = await self._query(call)
        match attempts.ledger_after_doubt(word):
            case attempts.Adopt():
                assert isinstance(word, ToolOutcome)
                return word
            case attempts.Done():
                return outcome  # the ledger never saw it: the attempt's own outcome stands
        self._outcome_unknown(call, outcome.error.message if outcome.error else "", call_deadline_ms)
        return None

    async def _carry_out(self, call: CallState, outcome: ToolOutcome, verdict: attempts.ToolVerdict) -> None:
        ctx, counters = self.ctx, self.ctx.ports.counters
        if isinstance(verdict, attempts.Retry):
            counters.inc("retry_count", tool=call.tool)
            ctx.add(self._retry_event(call, call.attempts + 1, verdict.delay_s, outcome))
            span_event("retry_scheduled", call_id=call.call_id, delay_s=verdict.delay_s)
            return
        self._step_began.pop(call.call_id, None)
        if isinstance(verdict, attempts.StepTimeout):
            if verdict.exhausted:
                counters.inc("retry_exhausted_count", tool=call.tool)
            outcome = self._step_timeout(call, outcome)
        elif isinstance(verdict, attempts.Done) and verdict.exhausted:
            counters.inc("retry_exhausted_count", tool=call.tool)
        self.record(call, await bound_tool_outcome(ctx, outcome))

    # -- what the core is asked ---------------------------------------------------------------------

    def _plan(self, call: CallState) -> attempts.Send | attempts.StepTimeout | attempts.Expire:
        ctx = self.ctx
        spec = ctx.ports.tools.spec(call.tool)
        spec_timeout = spec.default_timeout.ToTimedelta().total_seconds() if spec is not None else 0.0
        return ctx.plan_call(spec_timeout or ctx.settings.tool_timeout_s, self._step_deadline(call))

    def _step_deadline(self, call: CallState) -> float:
        """When this call, all its attempts and backoff included, must end (``[timeouts] tool_step_s``)."""
        began = self._step_began.setdefault(call.call_id, self.ctx.ports.clock())
        return step_deadline_s(began_s=began, step_s=self.ctx.settings.timeouts.tool_step_s)

    def _verdict(
        self,
        call: CallState,
        outcome: ToolOutcome,
        *,
        write: bool,
        layer: attempts.TimeoutLayer,
        began: float,
        attempt: int = 0,
        reconciled: bool = False,
    ) -> attempts.ToolVerdict:
        ctx = self.ctx
        if not reconciled:  # one attempt's own outcome, not a ledger's word on it
            ctx.ports.counters.observe(
                "tool_duration", ctx.ports.clock() - began, **tool_labels(call, outcome)
            )
        if (outcome.timed_out or outcome.host_timed_out) and not reconciled:
            ctx.ports.counters.inc("timeout_count", tool=call.tool)
            decision("timeout", "%s attempt %s timed out", call.tool, attempt or call.attempts, layer=layer)
        clock = attempts.AttemptClock(
            began_s=began,
            now_s=ctx.ports.clock(),
            step_deadline_s=self._step_deadline(call),
            run_deadline_s=ctx.deadline_s,
            layer=layer,
        )
        return attempts.tool_verdict(
            outcome,
            tool=call.tool,
            attempt=attempt or call.attempts,
            write=write,
            cancelled=ctx.handle.cancel_reason is not None,
            clock=clock,
            retry=ctx.retry_policy(ctx.settings.tool_attempts),
            rand=ctx.ports.rand(),
            reconciled=reconciled,
            on_unauthorized=self._on_unauthorized(),
        )

    def _on_unauthorized(self) -> attempts.UnauthorizedPolicy:
        return attempts.UnauthorizedPolicy(self.ctx.agent.config.on_tool_unauthorized)

    def _out_of_time(self, call: CallState, plan: attempts.StepTimeout | attempts.Expire) -> None:
        ctx = self.ctx
        if isinstance(plan, attempts.StepTimeout):
            self._step_began.pop(call.call_id, None)
            self.record(call, self._step_timeout(call))
        else:
            ctx.add(*end_events(ctx.state, Phase.EXPIRED, "deadline_exceeded", retryable=True))

    def _step_timeout(self, call: CallState, last: ToolOutcome | None = None) -> ToolOutcome:
        """The step layer fired: the call ends failed, saying so (never a write in doubt: tool_verdict)."""
        limit = self.ctx.settings.timeouts.tool_step_s
        message = f"step_timeout: {call.tool} with its retries did not finish within tool_step_s={limit:g}s"
        decision("step_timeout", "%s", message, tool=call.tool)
        if last is not None and last.error is not None:
            message += f" (last attempt: {last.error.message})"
        return ToolOutcome.failure("TRANSIENT", message)

    # -- before the send ----------------------------------------------------------------------------

    def _refused(self, call: CallState) -> bool:
        """Defence in depth behind the decider: a tool the active agent lacks is never sent (R10.2)."""
        policy = self.ctx.policy
        if policy.allows(call.tool):
            return False
        error = not_allowed_error(call.tool, policy.agent_name)
        self.record(call, ToolOutcome.failure("NOT_ALLOWED", error.message))
        return True

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
        ctx = self.ctx
        word = await self._query(call)
        match attempts.ledger_before_resend(word, cancelled=ctx.handle.cancel_reason is not None):
            case attempts.Adopt():
                assert isinstance(word, ToolOutcome)
                self.record(call, await bound_tool_outcome(ctx, word))
                return False
            case attempts.Unknown():
                self._outcome_unknown(call, "recovered call: its tool host could not say what happened", 0)
                return False
        self._restart(call)  # never reached the ledger, or provably did not complete: same key
        await ctx.flush()
        return True

    # -- sending ------------------------------------------------------------------------------------

    async def _send_write(self, call: CallState, *, timeout_s: float) -> ToolOutcome:
        """Send a write; a cancel request does not cut it at once (see the module's doc).

        Raises:
            Cancelled: the cancel came before the write was sent; it is not sent.
        """
        ctx, handle = self.ctx, self.ctx.handle
        if handle.cancel_reason is not None:
            raise Cancelled()
        sending = asyncio.ensure_future(self._send(call, timeout_s=timeout_s))
        try:
            if not await ctx.cancel_arrives_before(sending):
                return await sending
            await self._commit_cancel_now()
            await ctx.ports.tools.cancel(
                call.tool,
                call.arguments_json,
                metadata=ctx.call_metadata(call),
                reason=handle.cancel_reason or "cancelled",
                timeout_s=ctx.settings.query_timeout_s,
            )
            await asyncio.wait({sending}, timeout=ctx.settings.timeouts.cancel_wait_s)
            if sending.done():
                return sending.result()
            # No answer within the cancel's bound: the ledger is asked what the write did.
            return ToolOutcome.failure(
                "CANCELLED",
                "the write did not answer within cancel_wait_s of the cancel",
                transport_lost=True,
            )
        finally:
            # Still running only on shutdown, a lost lease or the cancel's bound: cut the RPC; the
            # host finishes (or stops) the write and its ledger records what it did.
            sending.cancel()

    async def _commit_cancel_now(self) -> None:
        """Commit cancel.requested while the write is still in flight, not once it ends (R6.6)."""
        ctx = self.ctx
        if ctx.state.phase is Phase.TOOL_STEP:
            ctx.add(
                CancelRequested(
                    reason=ctx.handle.cancel_reason or "cancelled", requested_by=ctx.handle.cancel_by
                )
            )
            await ctx.flush()

    async def _send(self, call: CallState, *, timeout_s: float) -> ToolOutcome:
        ctx, ports = self.ctx, self.ctx.ports
        ports.faults.hit("tool_before_send")
        # The metadata is built inside the call's execute_tool span: the host continues that span.
        invoke = partial(ports.tools.invoke, call.tool, call.arguments_json, timeout_s=timeout_s)
        sending = asyncio.ensure_future(traced_tool(call, lambda: invoke(metadata=ctx.call_metadata(call))))
        sent_ms = ports.now_ms()
        if ports.faults.armed:
            # Let the request leave before crashing "between sent and recorded".
            await asyncio.wait({sending}, timeout=0.05)
            ports.faults.hit("tool_request_sent")
        outcome = await sending
        self._sent[call.call_id] = (sent_ms, ports.now_ms())
        return outcome

    # -- recording ----------------------------------------------------------------------------------

    def _retry_event(self, call: CallState, attempt: int, delay: float, outcome: ToolOutcome) -> Event:
        error = outcome.error or ToolError(ToolErrorCode.UNSPECIFIED)
        return RetryScheduled(
            call_id=call.call_id,
            attempt=attempt,
            delay=f"{delay:.3f}s",
            reason=f"TOOL_ERROR_CODE_{error.code.value}: {error.message}"[:400],
            due_time=rfc3339(self.ctx.ports.now_ms() + math.ceil(delay * 1000)),
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
        """Record a settled outcome, and end or pause the run where it says so (UNAUTHORIZED,
        KEY_CONFLICT)."""
        self._end_if(self._add_result(call, outcome), call, outcome)

    def _end_if(self, settled: _Settled, call: CallState, outcome: ToolOutcome) -> None:
        ctx = self.ctx
        if ctx.state.ended or ctx.state.phase is Phase.WAITING_APPROVAL:
            return  # an earlier call of the batch ended or paused the run already
        message = outcome.error.message if outcome.error is not None else ""
        if isinstance(settled, attempts.Fail):
            ctx.add(*end_events(ctx.state, Phase.FAILED, settled.reason, message=message))
        elif isinstance(settled, attempts.Pause):
            now_ms = ctx.ports.now_ms()
            expire_ms = now_ms + math.ceil(ctx.agent.config.approvals.timeout_s * 1000)
            pause = unauthorized_pause(
                call, message=message, approval_id=uuid.uuid4().hex, now_ms=now_ms, expire_ms=expire_ms
            )
            ctx.add(pause)  # the loop parks the run until a person answers or the pause expires

    def _add_result(self, call: CallState, outcome: ToolOutcome) -> _Settled:
        """The result event and the run variables the result sets (S004 §1.2); what the outcome means.

        Raises:
            LeaseLost: the host refused this owner's fencing token.
        """
        ctx = self.ctx
        settled = attempts.recorded_verdict(
            outcome,
            tool=call.tool,
            cancelled=ctx.handle.cancel_reason is not None,
            on_unauthorized=self._on_unauthorized(),
        )
        if isinstance(settled, attempts.Fenced):
            raise LeaseLost(f"tool host refused run {ctx.run_id}'s fencing token {ctx.handle.generation}")
        if isinstance(settled, attempts.Pause):
            return settled  # nothing is recorded of the call: a person fixes it, then it runs again
        result = self._result_event(call, outcome)
        ctx.add(result)
        # A large result's view (or its refusal) lacks the members addressed to the runtime: they
        # were kept aside. A resource the call made is cleaned up even if the model never saw it.
        text = outcome.runtime_json if outcome.runtime_json is not None else outcome.result_json
        deduplicated = isinstance(result, ToolCompleted) and result.deduplicated
        if text and not deduplicated:  # a duplicate's resources are the first call's, not this run's
            register_cleanups(ctx, call, text, outcome.host)
        if isinstance(result, ToolCompleted) and not (result.truncated and outcome.runtime_json is None):
            self._set_variables(call, text or "")  # only a result the run keeps as a success sets them
        return settled

    def _set_variables(self, call: CallState, text: str) -> None:
        ctx = self.ctx
        change = variables_requested(text, ctx.state.variables)
        if change is None:
            return
        ctx.add(
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
            ctx.ports.counters.inc("variables_refused_count", tool=call.tool)
        else:
            ctx.commits.change(RowUpdate(variables_json=variables_json(ctx.state.variables)))

    def _result_event(self, call: CallState, outcome: ToolOutcome) -> Event:
        if outcome.replayed or outcome.deduplicated:
            self.ctx.ports.counters.inc("duplicate_suppressed_count", tool=call.tool)
        sent = self._sent.pop(call.call_id, None)
        # When the last attempt was sent and answered, and by which host (S004 §12); a result
        # learned from a ledger query (or never sent) has no send time.
        record: dict[str, Any] = {
            "start_time": rfc3339(sent[0]) if sent is not None else None,
            "end_time": rfc3339(sent[1] if sent is not None else self.ctx.ports.now_ms()),
            "host": outcome.host,
        }
        error = outcome.error
        if error is None and (refused := self._result_error(outcome.result_json or "")):
            error = refused
        if error is not None:
            return ToolFailed(step=call.step, call_id=call.call_id, tool=call.tool, error=error, **record)
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

    def _result_error(self, result_json: str) -> ToolError | None:
        """A result nesting past the bounds is a tool error: nothing downstream must recurse into it."""
        limit = self.ctx.policy.argument_limits.max_depth
        if nesting_depth(result_json, stop_at=limit) <= limit:
            return None
        message = f"the tool ran, but its result was refused: JSON nests deeper than {limit} levels"
        return ToolError(ToolErrorCode.PERMANENT, message)

    def _outcome_unknown(self, call: CallState, reason: str, call_deadline_ms: int) -> None:
        self.ctx.ports.counters.inc("unknown_result_count", tool=call.tool)
        span_event("unknown_outcome", tool=call.tool, call_id=call.call_id)
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

    # -- parallel read-only calls -------------------------------------------------------------------

    async def run_batch(self, calls: tuple[CallState, ...]) -> None:
        """Send concurrency-safe, read-only calls at once; their events enter the log in call order.

        Retries of a batch call wait in memory (a crash re-sends a read-only call, which is safe);
        a cancel keeps every result that had arrived and marks the rest cancelled.
        """
        ctx = self.ctx
        calls = tuple(c for c in calls if not self._refused(c))
        if not calls:
            return
        ctx.check_lease()
        settled: dict[str, list[Event | ToolOutcome]] = {c.call_id: [] for c in calls}
        with contextlib.suppress(Cancelled):  # results that arrived before the cancel are kept below
            await ctx.io(lambda: asyncio.gather(*(self._settle_read(c, settled[c.call_id]) for c in calls)))
        ends: list[tuple[_Settled, CallState, ToolOutcome]] = []
        for call in calls:
            steps = settled[call.call_id]
            last = steps[-1] if steps else None
            outcome = (
                last
                if isinstance(last, ToolOutcome)
                else ToolOutcome.failure("CANCELLED", "cancelled in flight")
            )
            ctx.add(*(e for e in steps if not isinstance(e, ToolOutcome)))
            outcome = await bound_tool_outcome(ctx, outcome)
            ends.append((self._add_result(call, outcome), call, outcome))
        # Every result is in the log before the run ends (a failure first) or pauses.
        for verdict, call, outcome in sorted(ends, key=lambda end: not isinstance(end[0], attempts.Fail)):
            self._end_if(verdict, call, outcome)

    @logs_call
    async def _settle_read(self, call: CallState, steps: list[Event | ToolOutcome]) -> None:
        """One read with its retries; its retry events, then its final outcome, go into ``steps``."""
        ctx = self.ctx
        attempt = call.attempts
        self._step_deadline(call)  # the whole step runs inside this method
        try:
            while True:
                plan = self._plan(call)
                if isinstance(plan, attempts.StepTimeout):
                    steps.append(self._step_timeout(call))
                    return
                if isinstance(plan, attempts.Expire):
                    steps.append(ToolOutcome.failure("TRANSIENT", "the run's deadline left no time"))
                    return
                began = ctx.ports.clock()
                outcome = await self._send(call, timeout_s=plan.timeout_s)
                verdict = self._verdict(
                    call, outcome, write=False, layer=plan.layer, began=began, attempt=attempt
                )
                if isinstance(verdict, attempts.Retry):
                    ctx.ports.counters.inc("retry_count", tool=call.tool)
                    attempt += 1
                    steps += [
                        self._retry_event(call, attempt, verdict.delay_s, outcome),
                        self._attempt_event(call, attempt),
                    ]
                    await ctx.ports.sleep(verdict.delay_s)
                    continue
                if isinstance(verdict, attempts.StepTimeout | attempts.Done) and verdict.exhausted:
                    ctx.ports.counters.inc("retry_exhausted_count", tool=call.tool)
                steps.append(
                    self._step_timeout(call, outcome)
                    if isinstance(verdict, attempts.StepTimeout)
                    else outcome
                )
                return
        finally:
            self._step_began.pop(call.call_id, None)

    # -- agents as tools ----------------------------------------------------------------------------

    async def _child_run(self, call: CallState) -> ToolOutcome:
        """Run another agent as a child run and return its final answer (R9.1).

        The child's deadline is the parent's remaining time; its request key is the call's
        idempotency key, so a recovered parent re-attaches to the same child instead of starting
        another. Cancelling the parent cancels the child.
        """
        ctx, ports = self.ctx, self.ctx.ports
        target = call.tool.removeprefix(AGENT_TOOL_PREFIX)
        if target not in ctx.agent.config.agent_tools or target not in ctx.agent.peers:
            return ToolOutcome.failure(
                "UNKNOWN_TOOL", f"agent {target!r} is not available to {ctx.agent.name}"
            )
        try:
            question = str(loads_bounded(call.arguments_json or "{}").get("input", ""))
        except (ValueError, AttributeError):
            question = ""
        if not question.strip():
            return ToolOutcome.failure("INVALID_INPUT", "an agent tool needs a non-empty 'input'")
        remaining = attempts.child_time_left_s(
            now_s=ports.clock(), run_deadline_s=ctx.deadline_s, reserve_s=ctx.settings.call_reserve_s
        )
        if remaining <= 0:
            return ToolOutcome.failure("TRANSIENT", "no time left for a child run")
        child_agent = ctx.agent.switch(target)
        request = StartRequest(
            tenant_id=ctx.tenant_id,
            agent=child_agent,
            input=question,
            budget_overrides={"timeout_s": min(child_agent.config.budgets.timeout_s, remaining)},
            request_key=f"child:{call.idempotency_key}",
            metadata={"parent_run_id": ctx.run_id, "parent_call_id": call.call_id},
            created_by=f"run:{ctx.run_id}",
        )
        child_id = await ports.children.start(request)
        if register_child_run(ctx, call, child_id):
            await ctx.flush()  # the parent's end cancels a child it still has (S002 §8)
        try:
            ended = await ctx.io(lambda: ports.children.wait_for_end(child_id))
        except Cancelled:
            await ports.children.cancel(
                child_id,
                tenant_id=ctx.tenant_id,
                reason=f"parent run {ctx.run_id} cancelled",
                requested_by=f"run:{ctx.run_id}",
            )
            return ToolOutcome.failure("CANCELLED", f"cancelled; child run {child_id} was cancelled too")
        if ended.phase == Phase.COMPLETED.value:
            return ToolOutcome(json.dumps({"run_id": ended.run_id, "output": ended.output}), None)
        return ToolOutcome.failure(
            "PERMANENT", f"child run {ended.run_id} ended {ended.phase}: {ended.reason}"
        )

    # -- learning outcomes --------------------------------------------------------------------------

    async def _query(self, call: CallState) -> LedgerWord:
        """The ledger's word on a call: its recorded outcome, NOT_FOUND, or UNKNOWN (running, unreachable)."""
        ctx = self.ctx
        return await ctx.ports.tools.query(
            call.tool,
            call.arguments_json,
            metadata=ctx.call_metadata(call),
            timeout_s=ctx.settings.query_timeout_s,
        )

    @logs_call
    async def reconcile(self, call: CallState) -> None:
        """The run is in UNKNOWN_OUTCOME: ask again; park with backoff while nobody can tell.

        A cancelled run does not wait past its bound (§11.11): it ends CANCELLED listing the call
        as unknown, handed to the operator queue (``needs_attention``).
        """
        ctx, ports = self.ctx, self.ctx.ports
        word = await self._query(call)
        verdict = attempts.ledger_in_wait(
            word,
            cancelled=ctx.handle.cancel_reason is not None,
            now_ms=ports.now_ms(),
            call_deadline_ms=call.call_deadline_ms or round(ctx.deadline_s * 1000),
            cancel_requested_ms=ctx.handle.cancel_requested_ms,
            cancel_wait_ms=math.ceil(ctx.settings.timeouts.cancel_wait_s * 1000),
            ask_again_ms=ports.now_ms() + self._reconcile_delay_ms(),
        )
        match verdict:
            case attempts.Adopt():
                assert isinstance(word, ToolOutcome)
                self.record(call, await bound_tool_outcome(ctx, word))
            case attempts.Resend():
                self._restart(call)  # the ledger says it did not complete, or never saw it: same key
            case attempts.NeverRan():
                self.record(call, ToolOutcome.failure("CANCELLED", "the tool host never ran the call"))
            case attempts.HandOver():
                ports.counters.inc("unknown_handed_over_count", tool=call.tool)
                ctx.add(*end_events(ctx.state, Phase.CANCELLED, ctx.state.cancel_reason or "cancelled"))
            case attempts.Park(wake_ms=wake_ms):
                await ctx.park(wake_ms)

    def _reconcile_delay_ms(self) -> int:
        """The next query's delay; the attempt count is persisted with the park, so it keeps growing."""
        ctx = self.ctx
        ctx.reconcile_attempts += 1
        return reconcile_delay_ms(
            attempt=ctx.reconcile_attempts,
            escalated=ctx.state.escalation is not None,
            policy=ctx.waits,
            rand=ctx.ports.rand(),
        )


def _duplicate_of(first: dict[str, object] | None) -> IntentDuplicate:
    """The earlier call, from the proto3 JSON of the tool host's ``IntentDuplicate``."""
    first = first or {}
    first_time = first.get("first_time")
    return IntentDuplicate(
        intent_key=str(first.get("intent_key", "")),
        idempotency_key=str(first.get("idempotency_key", "")),
        run_id=str(first.get("run_id", "")),
        call_id=str(first.get("call_id", "")),
        first_time=str(first_time) if first_time is not None else None,
    )
