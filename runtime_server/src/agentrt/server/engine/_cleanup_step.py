"""Cleanups (S002 §8): registering what a run must release, and releasing it before the run ends.

Registration: a tool result's reserved ``_cleanup`` member (read by ``core.cleanups_requested``)
or a child run the run started. The engine refuses what only it can check: a cleanup tool that
no host serves, that needs a person's approval, or that another host than the registering
tool's serves (a tool may only clean up through its own host).

Release: while the run is CLEANING_UP the decider hands over one cleanup at a time, newest
first. Each attempt is persisted (cleanup.started) before it is made, carries the same
idempotency key every time, and is not cut by a cancel of the run: only shutdown stops it.
:func:`perform_cleanup` is the one attempt, shared with the background cleanup job.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agentrt.server.core import (
    CallState,
    CleanupCompleted,
    CleanupEntry,
    CleanupFailed,
    CleanupKind,
    CleanupRegistered,
    CleanupRequest,
    CleanupStarted,
    LeaseLost,
    ToolErrorCode,
    attempts,
    cleanup_key,
    cleanups_requested,
    rfc3339,
)
from agentrt.server.core import events as ev
from agentrt.server.engine._ports import Ports
from agentrt.server.engine._run import RunContext
from agentrt.server.store import CleanupColumns, RunRecord
from agentrt.server.telemetry import current_traceparent
from agentrt.server.tools import CallMetadata

__all__ = [
    "CleanupAttempt",
    "CleanupStep",
    "handover_columns",
    "perform_cleanup",
    "register_child_run",
    "register_cleanups",
]

log = logging.getLogger("agentrt.engine")

# Tool errors a retry of the same cleanup cannot fix.
_PERMANENT = frozenset(
    {
        ToolErrorCode.INVALID_INPUT,
        ToolErrorCode.PERMANENT,
        ToolErrorCode.UNKNOWN_TOOL,
        ToolErrorCode.UNAUTHORIZED,
        ToolErrorCode.KEY_CONFLICT,
    }
)


@dataclass(frozen=True, slots=True)
class CleanupAttempt:
    """What one attempt did: released, or why not and whether another attempt may help."""

    ok: bool
    message: str = ""
    retryable: bool = True


# -- registering ------------------------------------------------------------------------------------


def _next_id(ctx: RunContext) -> str:
    return f"c{len(ctx.state.cleanups) + 1}"


def register_cleanups(ctx: RunContext, call: CallState, result_json: str, host: str) -> None:
    """Register the cleanups a tool result asks for (or record why they were refused)."""
    asked = cleanups_requested(result_json, registered=len(ctx.state.cleanups))
    if asked is None:
        return
    if isinstance(asked, str):
        _refuse(ctx, call, CleanupRequest(CleanupKind.UNSPECIFIED, "", ""), asked)
        return
    for request in asked:
        problem = _tool_problem(ctx, request, host) if request.kind is CleanupKind.TOOL else None
        if problem is not None:
            _refuse(ctx, call, request, f"cleanup refused: {problem}")
            return  # whole or nothing: the tool's later requests may depend on the refused one
    for request in asked:
        ctx.add(
            CleanupRegistered(
                cleanup_id=_next_id(ctx),
                kind=request.kind,
                target=request.target,
                arguments_json=request.arguments_json,
                call_id=call.call_id,
                step=call.step,
            )
        )


def _tool_problem(ctx: RunContext, request: CleanupRequest, host: str) -> str | None:
    spec = ctx.ports.tools.spec(request.target)
    if spec is None:
        return f"no tool host serves {request.target!r}"
    if ctx.ports.tools.host_of(request.target) != host:
        return f"{request.target!r} is not served by the host of the tool that registered it"
    # A cleanup runs with no person present: what the approval policy would put to a person
    # (the tool's flag, or a policy hook on these arguments, e.g. a refund) is never a cleanup.
    try:
        requirement = ctx.ports.policies.approval(
            tool=request.target,
            arguments_json=request.arguments_json,
            agent_name=ctx.agent.name,
            options=ctx.agent.config.approvals.options,
            flagged=spec.requires_approval,
        )
    except Exception as exc:  # a policy that cannot judge does not let a call through
        return f"the approval policy could not judge {request.target!r}: {type(exc).__name__}"
    if requirement.required:
        return f"{request.target!r} needs a person's approval; a cleanup runs without one"
    return None


def _refuse(ctx: RunContext, call: CallState, request: CleanupRequest, reason: str) -> None:
    ctx.add(
        CleanupRegistered(
            kind=request.kind,
            target=request.target,
            call_id=call.call_id,
            step=call.step,
            refused_reason=reason[:400],
        )
    )
    ctx.ports.counters.inc("cleanup_refused_count")


def register_child_run(ctx: RunContext, call: CallState, child_run_id: str) -> bool:
    """Register a child run as a resource of the run (once); True when it was new."""
    if any(c.kind is CleanupKind.CHILD_RUN and c.target == child_run_id for c in ctx.state.cleanups):
        return False  # a recovered parent re-attached to the child it started before
    ctx.add(
        CleanupRegistered(
            cleanup_id=_next_id(ctx),
            kind=CleanupKind.CHILD_RUN,
            target=child_run_id,
            call_id=call.call_id,
            step=call.step,
        )
    )
    return True


def handover_columns(
    record: RunRecord, events: Iterable[tuple[str, str | Mapping[str, Any]]], now_ms: int
) -> CleanupColumns | None:
    """Cleanup columns that hand a run's unreleased cleanups to the cleanup job, for an end made from
    the row alone (repeated faults, a log this runtime cannot fold), which never runs them."""
    if record.cleanup_status != "PENDING":
        return None
    registered = completed = 0
    for event_type, payload in events:  # counted from the raw log: the state may be what failed
        if event_type == ev.CLEANUP_REGISTERED:
            data = json.loads(payload) if isinstance(payload, str) else payload
            registered += "refused_reason" not in data
        elif event_type == ev.CLEANUP_COMPLETED:
            completed += 1
    # At most what is left (the job replays the log and corrects it); due at once.
    unreleased = max(1, registered - completed)
    return CleanupColumns(status="UNKNOWN", unknown=unreleased, due_ms=now_ms)


# -- releasing --------------------------------------------------------------------------------------


async def perform_cleanup(
    ports: Ports,
    entry: CleanupEntry,
    *,
    run_id: str,
    tenant_id: str,
    session_id: str,
    generation: int,
    attempt: int,
    timeout_s: float,
) -> CleanupAttempt:
    """One attempt at releasing ``entry``'s resource, within ``timeout_s``.

    Raises:
        LeaseLost: the tool host refused the run's fencing token (another owner holds the run).
    """
    try:
        match entry.kind:
            case CleanupKind.TOOL:
                return await _call_tool(
                    ports, entry, run_id, tenant_id, session_id, generation, attempt, timeout_s
                )
            case CleanupKind.HOOK:
                async with asyncio.timeout(timeout_s):
                    return await _call_hook(ports, entry, run_id, tenant_id, attempt)
            case CleanupKind.CHILD_RUN:
                async with asyncio.timeout(timeout_s):
                    return await _end_child(ports, entry, run_id, tenant_id)
            case _:
                return CleanupAttempt(False, f"cleanup kind {entry.kind.value} is unknown", retryable=False)
    except TimeoutError:
        return CleanupAttempt(False, f"did not finish within {timeout_s:.1f}s")


async def _call_tool(
    ports: Ports,
    entry: CleanupEntry,
    run_id: str,
    tenant_id: str,
    session_id: str,
    generation: int,
    attempt: int,
    timeout_s: float,
) -> CleanupAttempt:
    metadata = CallMetadata(
        idempotency_key=cleanup_key(run_id, entry.cleanup_id),
        run_id=run_id,
        call_id=f"cleanup:{entry.cleanup_id}",
        attempt=attempt,
        fencing_token=generation,
        tenant_id=tenant_id,
        max_result_bytes=ports.settings.payloads.max_tool_result_bytes,
        session_id=session_id,
        traceparent=current_traceparent(),  # the run's span while it runs (none in the cleanup job)
    )
    outcome = await ports.tools.invoke(
        entry.target, entry.arguments_json or "{}", metadata=metadata, timeout_s=timeout_s
    )
    error = outcome.error
    if error is None:
        return CleanupAttempt(True)
    if error.code is ToolErrorCode.FENCED:
        raise LeaseLost(f"tool host refused run {run_id}'s fencing token {generation} for a cleanup")
    message = f"{error.code.value}: {error.message}"[:400]
    # An unsure host (in doubt) is retried under the same key: the ledger answers a done call.
    return CleanupAttempt(False, message, retryable=error.code not in _PERMANENT)


async def _call_hook(
    ports: Ports, entry: CleanupEntry, run_id: str, tenant_id: str, attempt: int
) -> CleanupAttempt:
    arguments = json.loads(entry.arguments_json or "{}")
    try:
        answer = await asyncio.to_thread(
            ports.policies.cleanup,
            name=entry.target,
            arguments=arguments,
            run_id=run_id,
            tenant_id=tenant_id,
            attempt=attempt,
        )
    except Exception as exc:  # a hook's failure is the cleanup's, never the engine's
        log.warning("cleanup hook %s of run %s raised %s", entry.target, run_id, type(exc).__name__)
        return CleanupAttempt(False, f"the hook raised {type(exc).__name__}: {str(exc)[:200]}")
    if answer is None:
        return CleanupAttempt(False, f"no cleanup plugin handles hook {entry.target!r}", retryable=False)
    if not answer:
        return CleanupAttempt(False, f"hook {entry.target!r} could not release it", retryable=False)
    return CleanupAttempt(True)


async def _end_child(ports: Ports, entry: CleanupEntry, run_id: str, tenant_id: str) -> CleanupAttempt:
    # Cancelling an ended run is a no-op; waiting returns at once for one.
    await ports.children.cancel(
        entry.target, tenant_id=tenant_id, reason=f"parent run {run_id} ended", requested_by=f"run:{run_id}"
    )
    await ports.children.wait_for_end(entry.target)
    return CleanupAttempt(True)


class CleanupStep:
    """Release the run's registered resources while it is CLEANING_UP."""

    def __init__(self, ctx: RunContext):
        self.ctx = ctx

    async def run(self, entry: CleanupEntry) -> None:
        """One attempt of ``entry`` (persisted first), then its outcome; a backoff before the next."""
        ctx, ports = self.ctx, self.ctx.ports
        config = ctx.settings.cleanup
        attempt = entry.attempts + 1
        if attempt > config.attempts:
            # The last attempt was sent and its outcome never recorded (a crash): give it up here;
            # the background job asks again under the same key.
            self._failed(entry, entry.attempts, "its last attempt's outcome was not recorded", final=True)
            return
        now_ms = ports.now_ms()
        first = not ctx.state.cleanup_deadline_ms
        deadline_ms = (
            attempts.cleanup_deadline_ms(now_ms=now_ms, deadline_s=config.deadline_s)
            if first
            else ctx.state.cleanup_deadline_ms
        )
        ctx.add(
            CleanupStarted(
                cleanup_id=entry.cleanup_id,
                attempt=attempt,
                idempotency_key=cleanup_key(ctx.run_id, entry.cleanup_id),
                deadline=rfc3339(deadline_ms) if first else None,
            )
        )
        await ctx.flush()  # a cleanup not persisted as started was not made (§11.1)
        ctx.check_lease()
        timeout = attempts.cleanup_timeout_s(
            call_timeout_s=config.call_timeout_s, now_ms=ports.now_ms(), deadline_ms=deadline_ms
        )
        done = await perform_cleanup(
            ports,
            entry,
            run_id=ctx.run_id,
            tenant_id=ctx.tenant_id,
            session_id=ctx.handle.session_id,
            generation=ctx.handle.generation,
            attempt=attempt,
            timeout_s=timeout,
        )
        ports.faults.hit("cleanup_response_received")
        if done.ok:
            ctx.add(CleanupCompleted(cleanup_id=entry.cleanup_id, attempt=attempt))
            return
        verdict = attempts.cleanup_verdict(
            retryable=done.retryable,
            attempt=attempt,
            retry=ctx.retry_policy(config.attempts),
            now_ms=ports.now_ms(),
            deadline_ms=deadline_ms,
            rand=ports.rand(),
        )
        self._failed(entry, attempt, done.message, final=not isinstance(verdict, attempts.Retry))
        if isinstance(verdict, attempts.Retry):
            await ctx.flush()
            await ports.sleep(verdict.delay_s)  # not cut by a cancel of the run: the run is already ending

    def _failed(self, entry: CleanupEntry, attempt: int, message: str, *, final: bool) -> None:
        ctx = self.ctx
        ctx.add(CleanupFailed(cleanup_id=entry.cleanup_id, attempt=attempt, message=message, final=final))
        if final:
            ctx.ports.counters.inc("cleanup_failed_count")
            log.warning(
                "run %s: cleanup %s (%s %s) failed for good: %s",
                ctx.run_id,
                entry.cleanup_id,
                entry.kind.value,
                entry.target,
                message,
            )
