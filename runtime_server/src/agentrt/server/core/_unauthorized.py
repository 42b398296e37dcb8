"""A tool's UNAUTHORIZED where the agent's policy pauses the run for a person (R6.3). Pure.

The tool refused the runtime's authority (its credentials downstream, a revoked grant): the call
did nothing, and nothing the model says can fix that. With ``on_tool_unauthorized = "pause"`` the
run waits in WAITING_APPROVAL instead of failing; the person who fixed the credentials approves
(the very call is sent again, same idempotency key; the tool host runs a key again after its
UNAUTHORIZED), or rejects (the run fails ``tool_unauthorized:<tool>``), and a pause nobody answers
in time fails the same way.
"""

from __future__ import annotations

from agentrt.server.core import _events as ev
from agentrt.server.core._json import JsonBoundsError, loads_bounded
from agentrt.server.core._keys import args_hash, canonical_json
from agentrt.server.core._state import CallState, RunState
from agentrt.server.core._timefmt import rfc3339

__all__ = ["UNAUTHORIZED_PAUSE", "is_unauthorized_pause", "unauthorized_pause", "unauthorized_retry"]

UNAUTHORIZED_PAUSE = "unauthorized-pause-1"  # the policy version a pause is recorded with


def is_unauthorized_pause(pending: ev.ApprovalRequested) -> bool:
    """The pending approval asks a person to fix a tool's authority, not to approve a call."""
    return pending.policy_version == UNAUTHORIZED_PAUSE


def unauthorized_pause(
    call: CallState, *, message: str, approval_id: str, now_ms: int, expire_ms: int
) -> ev.ApprovalRequested:
    """What the run asks a person after ``call``'s tool refused the runtime's authority."""
    try:
        canonical = canonical_json(loads_bounded(call.arguments_json or "{}"))
        digest = args_hash(canonical)
    except JsonBoundsError:  # never: the call was sent, so its arguments were bounded JSON
        canonical, digest = call.arguments_json, ""
    return ev.ApprovalRequested(
        approval_id=approval_id,
        call_id=call.call_id,
        tool=call.tool,
        arguments_json=canonical,
        args_hash=digest,
        impact_summary=(
            f"{call.tool} refused the runtime's authority: {message[:500]}. Approve once it is fixed "
            f"to send the same call again (same idempotency key); reject to end the run failed."
        ),
        policy_version=UNAUTHORIZED_PAUSE,
        expire_time=rfc3339(expire_ms),
        request_time=rfc3339(now_ms),
    )


def unauthorized_retry(state: RunState, pending: ev.ApprovalRequested) -> ev.ToolStarted:
    """The paused call, sent again under its key once a person fixed its authority."""
    call = next(c for c in state.calls if c.call_id == pending.call_id)
    usage = state.usage.totals()  # the same call: budgets count it once
    return ev.ToolStarted(
        step=call.step,
        call_id=call.call_id,
        tool=call.tool,
        arguments_json=call.arguments_json,
        idempotency_key=call.idempotency_key,
        attempt=call.attempts + 1,
        usage_before=usage,
        usage_after=usage,
    )
