"""What a fault (an unexpected error while driving a run) does to the run: pure rules.

A fault is recorded as a ``run.fault`` event and the attempt is retried from the
last committed event after a bounded backoff. The ``max_faults``-th fault ends the
run FAILED ``internal_error:<class>`` instead, so a run that cannot be driven never
loops through reclaims until its deadline. An unknown outcome is never collapsed into
FAILED (R4.4): a run past the limit in UNKNOWN_OUTCOME is parked until a person resolves
it, and a run past the limit with a write sent and not answered (tool.started committed,
no result) records that write's outcome as unknown and parks in UNKNOWN_OUTCOME, where the
ordinary reconcile path settles it once the tool host's ledger answers.

An environmental fault (the database, the network or the OS failed: see
``store.environmental``) is not the run's doing: it is retried with a jittered backoff and
does not count toward ``max_faults``, until a streak of them outlasts
``faults.environmental_retry_s`` (a streak ends when the run commits again). Past that bound
it counts like any other fault.

``retryable`` on the closing run.ended tells a client whether starting the same
run again may succeed: yes for environmental faults, no for everything else,
which is a deterministic bug that the same input hits again.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass

from agentrt.server.core import _events as ev
from agentrt.server.core._budgets import Usage
from agentrt.server.core._decide import end_events
from agentrt.server.core._phases import Phase
from agentrt.server.core._state import CallState, RunState
from agentrt.server.core._timefmt import rfc3339
from agentrt.server.core._waits import WaitPolicy, escalation_due_ms, reconcile_delay_ms

__all__ = [
    "FAULT_PARK_S",
    "EnvironmentalRetry",
    "EnvironmentalStreak",
    "FaultDecision",
    "decide_environmental",
    "decide_fault",
    "ended_from_row",
    "environmental_streak",
    "fault_delay_s",
    "fault_message",
    "fault_park_ms",
    "unknown_after_faults",
    "usage_plus",
    "write_in_doubt",
]

FAULT_PARK_S = 3600.0  # an UNKNOWN_OUTCOME run past its fault limit waits this long (or for a person)
_MAX_MESSAGE = 300
# user:password@ in URLs, and long tokens that look like keys: never copied into an event.
_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]+@")
_KEYLIKE = re.compile(r"\b(?:sk|pk|key|tok|ghp|xox[bp])[-_][A-Za-z0-9_\-]{8,}\b|\b[A-Za-z0-9+/_\-]{32,}\b")


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultDecision:
    """The run's answer to one more fault."""

    fault_count: int  # including this one
    end: bool  # the run ends FAILED internal_error:<class>
    retryable: bool  # for the closing run.ended: may the same run, started again, succeed?
    delay_s: float  # before the next attempt (when not ending)
    park: bool  # past the limit but not allowed to fail: park (see ``unknown`` for how long)
    # Past the limit with a write in doubt: record its outcome unknown (ToolOutcomeUnknown) and park
    # in UNKNOWN_OUTCOME until its ledger query is due; ``park`` is set too.
    unknown: bool
    reason: str  # the run's reason when it ends


def fault_delay_s(*, fault_count: int, base_s: float, cap_s: float) -> float:
    """Exponential and capped, without jitter: faults of one run are not a thundering herd."""
    return min(cap_s, base_s * (2.0 ** max(0, fault_count - 1)))


def decide_fault(
    *,
    previous_faults: int,
    max_faults: int,
    error_class: str,
    environmental: bool,
    unknown_outcome: bool,
    base_s: float,
    cap_s: float,
    write_in_doubt: bool = False,
) -> FaultDecision:
    """What one more (counted) fault of a run means, given the faults it had before.

    Args:
        environmental: the fault is the environment's (it counts only past its bound): the run,
            started again, may succeed.
        unknown_outcome: the run is in UNKNOWN_OUTCOME.
        write_in_doubt: a write of the run was sent and has no result (see :func:`write_in_doubt`).
    """
    count = previous_faults + 1
    past = count >= max_faults
    unknown = past and write_in_doubt and not unknown_outcome
    return FaultDecision(
        fault_count=count,
        end=past and not unknown_outcome and not write_in_doubt,
        retryable=environmental,
        delay_s=fault_delay_s(fault_count=count, base_s=base_s, cap_s=cap_s),
        park=past and (unknown_outcome or write_in_doubt),
        unknown=unknown,
        reason=f"internal_error:{error_class[:100]}",
    )


def write_in_doubt(state: RunState, *, is_write: Callable[[str], bool]) -> CallState | None:
    """The write whose tool.started is committed and that has no result: nobody knows its effect.

    A call waiting for a scheduled retry is not in doubt (its last attempt said it did not
    complete), nor is one already recorded unknown (the run is in UNKNOWN_OUTCOME then).

    Args:
        is_write: whether a tool is retried only through its key or after a query (invariant 3).
    """
    for call in state.calls:
        sent = call.started and not call.finished and call.retry_attempt <= call.attempts
        if sent and not call.unknown and is_write(call.tool):
            return call
    return None


def unknown_after_faults(call: CallState, *, now_ms: int, fault_count: int) -> ev.ToolOutcomeUnknown:
    """The unknown outcome a run past its fault limit records for its write in doubt."""
    return ev.ToolOutcomeUnknown(
        step=call.step,
        call_id=call.call_id,
        tool=call.tool,
        idempotency_key=call.idempotency_key,
        reason=f"the run faulted {fault_count} times while this write was in flight; its ledger decides",
        unknown_time=rfc3339(now_ms),
    )


def fault_park_ms(state: RunState, *, now_ms: int, deadline_ms: int, policy: WaitPolicy, rand: float) -> int:
    """When a run parked in UNKNOWN_OUTCOME by its fault limit asks its ledger: as a first
    reconcile park would, or when its wait escalates, if sooner."""
    escalated = state.escalation is not None
    wake_ms = now_ms + reconcile_delay_ms(attempt=1, escalated=escalated, policy=policy, rand=rand)
    due = escalation_due_ms(state, deadline_ms=deadline_ms, policy=policy)
    return min(wake_ms, max(due, now_ms + 1)) if due is not None else wake_ms


def ended_from_row(state: RunState, reason: str, *, message: str, retryable: bool) -> tuple[ev.Event, ...]:
    """run.failed and run.ended of a run ended from its row (its fault limit), with the real
    done / not-done / unknown lists of its log (S002 §7.3).

    Never run.closing: a run ended from its row does not run its cleanups, it hands them to the
    cleanup job.
    """
    without_cleanups = dataclasses.replace(state, cleanups=[])
    return end_events(without_cleanups, Phase.FAILED, reason, message=message, retryable=retryable)


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvironmentalStreak:
    """Environmental faults of a run since it last committed."""

    began_s: float  # the first fault of the streak
    faults: int
    revision: int | None  # the run's revision the last fault saw (None: not known)

    def after_own_commit(self) -> EnvironmentalStreak:
        """The streak once a run.fault was committed: that commit is not the run's progress."""
        return dataclasses.replace(self, revision=None)


def environmental_streak(
    previous: EnvironmentalStreak | None, *, now_s: float, revision: int | None
) -> EnvironmentalStreak:
    """The streak one more environmental fault makes; a run that committed since starts a new one."""
    progressed = (
        previous is not None
        and revision is not None
        and previous.revision is not None
        and revision > previous.revision
    )
    if previous is None or progressed:
        return EnvironmentalStreak(began_s=now_s, faults=1, revision=revision)
    seen = revision if revision is not None else previous.revision
    return EnvironmentalStreak(began_s=previous.began_s, faults=previous.faults + 1, revision=seen)


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvironmentalRetry:
    """What an environmental fault does: retried without counting, or (past the bound) counted."""

    retry: bool
    delay_s: float  # before the next attempt, when retried


def decide_environmental(
    streak: EnvironmentalStreak, *, now_s: float, bound_s: float, base_s: float, cap_s: float, rand: float
) -> EnvironmentalRetry:
    """Retry the run after a jittered, growing delay while the streak is within ``bound_s``.

    Half the delay is fixed and half random (``rand`` in [0, 1)): the runs a database blip hit
    together do not come back together, and none comes back at once.
    """
    elapsed = now_s - streak.began_s
    if elapsed >= bound_s:
        return EnvironmentalRetry(retry=False, delay_s=0.0)
    full = fault_delay_s(fault_count=streak.faults, base_s=base_s, cap_s=cap_s)
    return EnvironmentalRetry(retry=True, delay_s=min(full * (0.5 + 0.5 * rand), bound_s - elapsed))


def redact_secrets(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` with known secrets, URL credentials and key-shaped words replaced by ``[redacted]``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    return _KEYLIKE.sub("[redacted]", _CREDENTIALS.sub("[redacted]@", text))


def fault_message(error_class: str, text: str, where: str = "", secrets: tuple[str, ...] = ()) -> str:
    """A bounded description of an exception with credentials and known secrets taken out."""
    first_line = text.strip().splitlines()[0] if text.strip() else ""
    first_line = redact_secrets(first_line, secrets)
    message = f"{error_class} at {where}" if where else error_class
    return f"{message}: {first_line}"[:_MAX_MESSAGE] if first_line else message[:_MAX_MESSAGE]


def usage_plus(base: Usage, spent: Usage) -> Usage:
    """``base`` with ``spent`` added; per-tool counts are summed too."""
    per_tool = dict(base.calls_per_tool)
    for tool, n in spent.calls_per_tool.items():
        per_tool[tool] = per_tool.get(tool, 0) + n
    return Usage(
        model_steps=base.model_steps + spent.model_steps,
        tool_calls=base.tool_calls + spent.tool_calls,
        input_tokens=base.input_tokens + spent.input_tokens,
        output_tokens=base.output_tokens + spent.output_tokens,
        cost_micros=base.cost_micros + spent.cost_micros,
        handoffs=base.handoffs + spent.handoffs,
        calls_per_tool=per_tool,
    )
