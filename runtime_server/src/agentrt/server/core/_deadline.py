"""Deadline math (R6.5) and backoff (R6.4). Pure: callers pass the time in."""

from __future__ import annotations


def call_timeout_s(*, now_s: float, run_deadline_s: float, call_timeout_s: float, reserve_s: float) -> float:
    """Timeout for one model or tool call: min(call timeout, time left before the run's reserve).

    Never negative; 0 means "no time left, do not start the call".
    """
    return max(0.0, min(call_timeout_s, run_deadline_s - reserve_s - now_s))


def backoff_delay_s(*, attempt: int, base_s: float, cap_s: float, rand: float) -> float:
    """Exponential backoff with full jitter: uniform in [0, min(cap, base * 2**(attempt-1))).

    ``rand`` is a number in [0, 1) supplied by the caller, so the function stays pure.
    """
    return rand * min(cap_s, base_s * (2.0 ** max(0, attempt - 1)))


def retry_fits(*, now_s: float, delay_s: float, expected_call_s: float, deadline_s: float) -> bool:
    """A retry is scheduled only if it can finish before the deadline (R6.4)."""
    return now_s + delay_s + expected_call_s < deadline_s
