"""What a fault (an unexpected error while driving a run) does to the run: pure rules.

A fault is recorded as a ``run.fault`` event and the attempt is retried from the
last committed event after a bounded backoff. The ``max_faults``-th fault ends the
run FAILED ``internal_error:<class>`` instead, so a run that cannot be driven never
loops through reclaims until its deadline. A run in UNKNOWN_OUTCOME is never
collapsed into FAILED (R4.4): past the limit it is parked until a person resolves it.

``retryable`` on the closing run.ended tells a client whether starting the same
run again may succeed: yes for environmental faults (the store or the network
failed: OSError, timeouts, database connection errors), no for everything else,
which is a deterministic bug that the same input hits again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentrt.server.core._budgets import Usage

__all__ = [
    "FAULT_PARK_S",
    "FaultDecision",
    "decide_fault",
    "fault_delay_s",
    "fault_message",
    "usage_plus",
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
    park: bool  # past the limit but not allowed to fail (UNKNOWN_OUTCOME): park for FAULT_PARK_S
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
) -> FaultDecision:
    """What one more fault of a run means, given the faults it had before."""
    count = previous_faults + 1
    past = count >= max_faults
    return FaultDecision(
        fault_count=count,
        end=past and not unknown_outcome,
        retryable=environmental,
        delay_s=fault_delay_s(fault_count=count, base_s=base_s, cap_s=cap_s),
        park=past and unknown_outcome,
        reason=f"internal_error:{error_class[:100]}",
    )


def fault_message(error_class: str, text: str, where: str = "", secrets: tuple[str, ...] = ()) -> str:
    """A bounded description of an exception with credentials and known secrets taken out."""
    first_line = text.strip().splitlines()[0] if text.strip() else ""
    for secret in secrets:
        if secret:
            first_line = first_line.replace(secret, "[redacted]")
    first_line = _KEYLIKE.sub("[redacted]", _CREDENTIALS.sub("[redacted]@", first_line))
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
