"""The pure rules of contained faults: count, end, backoff, retryable, message, usage."""

from __future__ import annotations

import pytest

from agentrt.server.core import (
    RunFault,
    RunState,
    Usage,
    decide_fault,
    fault_delay_s,
    fault_message,
    usage_plus,
)


def _decide(previous: int, *, environmental: bool = False, unknown: bool = False) -> object:
    return decide_fault(
        previous_faults=previous,
        max_faults=3,
        error_class="KeyError",
        environmental=environmental,
        unknown_outcome=unknown,
        base_s=0.2,
        cap_s=5.0,
    )


def test_the_third_fault_ends_the_run() -> None:
    first, second, third = (_decide(n) for n in range(3))
    assert [d.fault_count for d in (first, second, third)] == [1, 2, 3]  # type: ignore[attr-defined]
    assert [d.end for d in (first, second, third)] == [False, False, True]  # type: ignore[attr-defined]
    assert third.reason == "internal_error:KeyError"  # type: ignore[attr-defined]
    assert not third.retryable  # type: ignore[attr-defined]  # a bug: the same run faults again
    assert _decide(2, environmental=True).retryable  # type: ignore[attr-defined]


def test_a_run_past_its_limit_in_unknown_outcome_parks_instead_of_failing() -> None:
    decision = _decide(5, unknown=True)
    assert not decision.end and decision.park  # type: ignore[attr-defined]


def test_backoff_is_bounded_and_grows() -> None:
    delays = [fault_delay_s(fault_count=n, base_s=0.2, cap_s=5.0) for n in range(1, 10)]
    assert delays[:3] == [0.2, 0.4, 0.8]
    assert max(delays) == 5.0
    assert sum(delays[:2]) < 1.0  # three faults end a run within seconds


@pytest.mark.parametrize(
    ("text", "hidden"),
    [
        ("connect to postgresql://admin:hunter2@db:5432/x failed", "hunter2"),
        ("bad key sk-abcdefghijklmnopqrstuvwxyz012345 used", "sk-abcdefghijklmnop"),
        ("token Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFy!", "Zm9vYmFyYmF6cXV4"),
        ("the secret is TOPSECRET", "TOPSECRET"),
    ],
)
def test_fault_messages_hide_secrets(text: str, hidden: str) -> None:
    message = fault_message("OperationalError", text, "store.py:12 in write", secrets=("TOPSECRET",))
    assert hidden not in message
    assert message.startswith("OperationalError at store.py:12 in write: ")


def test_fault_messages_are_bounded_and_one_line() -> None:
    message = fault_message("ValueError", "x" * 10_000 + "\nsecond line")
    assert len(message) <= 300 and "\n" not in message
    assert fault_message("ValueError", "") == "ValueError"


def test_usage_plus_and_the_fold_count_every_model_call() -> None:
    base = Usage(model_steps=2, input_tokens=20, output_tokens=10, tool_calls=1, calls_per_tool={"t": 1})
    spent = Usage(model_steps=1, input_tokens=7, output_tokens=3, cost_micros=500_000)
    after = usage_plus(base, spent)
    assert (after.model_steps, after.input_tokens, after.output_tokens) == (3, 27, 13)
    assert after.calls_per_tool == {"t": 1} and after.cost_micros == 500_000
    state = RunState(run_id="r")
    state.apply(RunFault(fault_count=1, usage_after=after.totals()))
    assert state.fault_count == 1 and state.usage.model_steps == 3
    state.apply(RunFault())  # an older fault: no count (one more), no usage (unchanged)
    assert state.fault_count == 2 and state.usage.model_steps == 3
