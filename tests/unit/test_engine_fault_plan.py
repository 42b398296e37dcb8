"""The fault-injection plan's syntax: counts, ranges and the raise action."""

from __future__ import annotations

import pytest

from agentrt.server.engine._faults import FaultPlan, InjectedFault


def fired(plan: FaultPlan, point: str, times: int) -> list[bool]:
    out = []
    for _ in range(times):
        try:
            plan.hit(point)
        except InjectedFault:
            out.append(True)
        else:
            out.append(False)
    return out


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("p=raise", [True, False, False, False]),
        ("p@2=raise", [False, True, False, False]),
        ("p@2..3=raise", [False, True, True, False]),
        ("p@1..=raise", [True, True, True, True]),
        ("q@1..=raise", [False, False, False, False]),  # another point: never
    ],
)
def test_raise_fires_on_the_listed_hits(spec: str, expected: list[bool]) -> None:
    assert fired(FaultPlan(spec), "p", 4) == expected


def test_an_unarmed_plan_does_nothing() -> None:
    plan = FaultPlan("")
    assert not plan.armed
    assert fired(plan, "after_model_response", 3) == [False, False, False]
