"""Deadline math (R6.5), backoff (R6.4) and timeout layers (S002 §5). Pure: callers pass the time in.

Four layers bound a call; the smallest time left wins:

- connect: establishing the connection to a tool host (``[timeouts] connect_s``);
- call: one attempt (the tool's timeout, ``tool_timeout_s``, ``model_timeout_s``);
- step: one call with all its retries and backoff (``[timeouts] tool_step_s`` / ``model_step_s``);
- run: the run's deadline, less the reserve kept for recording the end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum


class TimeoutLayer(StrEnum):
    """Which layer bounds a call's time: the one with the least time left."""

    CALL = "call"
    STEP = "step"
    RUN = "run"


@dataclass(frozen=True, slots=True)
class CallBudget:
    """How long a call may take now, and which layer set that."""

    timeout_s: float  # 0: no time left, do not start the call
    layer: TimeoutLayer


def call_timeout_s(*, now_s: float, run_deadline_s: float, call_timeout_s: float, reserve_s: float) -> float:
    """Timeout for one model or tool call: min(call timeout, time left before the run's reserve).

    Never negative; 0 means "no time left, do not start the call".
    """
    return max(0.0, min(call_timeout_s, run_deadline_s - reserve_s - now_s))


def step_deadline_s(*, began_s: float, step_s: float) -> float:
    """When a step that began at ``began_s`` must end; ``step_s`` 0 means no step limit (infinity)."""
    return began_s + step_s if step_s > 0 else math.inf


def call_budget(
    *, now_s: float, call_timeout_s: float, step_deadline_s: float, run_deadline_s: float, reserve_s: float
) -> CallBudget:
    """A call's timeout under the call, step and run layers: the smallest time left wins.

    A tie goes to the outer layer (run before step before call), the one that explains more.
    """
    run_left = run_deadline_s - reserve_s - now_s
    step_left = step_deadline_s - now_s
    layer, left = TimeoutLayer.CALL, call_timeout_s
    if step_left <= left:
        layer, left = TimeoutLayer.STEP, step_left
    if run_left <= left:
        layer, left = TimeoutLayer.RUN, run_left
    return CallBudget(max(0.0, left), layer)


def connect_timeout_s(*, connect_s: float, call_timeout_s: float) -> float:
    """How long to wait for a connection to a tool host: never longer than the call may take."""
    return max(0.0, min(connect_s, call_timeout_s))


def backoff_delay_s(*, attempt: int, base_s: float, cap_s: float, rand: float) -> float:
    """Exponential backoff with full jitter: uniform in [0, min(cap, base * 2**(attempt-1))).

    ``rand`` is a number in [0, 1) supplied by the caller, so the function stays pure.
    """
    return rand * min(cap_s, base_s * (2.0 ** max(0, attempt - 1)))


def retry_fits(
    *,
    now_s: float,
    delay_s: float,
    expected_call_s: float,
    deadline_s: float,
    step_deadline_s: float = math.inf,
) -> bool:
    """A retry is scheduled only if it can finish before the run's deadline and the step's (R6.4)."""
    return now_s + delay_s + expected_call_s < min(deadline_s, step_deadline_s)


def lease_lapsed(*, now_s: float, lease_deadline_s: float) -> bool:
    """Past its local deadline a worker may no longer trust its lease: it starts no new work."""
    return now_s >= lease_deadline_s


def extended_deadline_s(*, deadline_s: float, by_ms: int) -> float:
    """The run's deadline moved later by ``by_ms`` (time spent waiting for a person)."""
    return deadline_s + by_ms / 1000
