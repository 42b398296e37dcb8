"""Property tests of the transition table (R4.1, R4.2)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrt.server.core import (
    RULES,
    TERMINAL_PHASES,
    IllegalTransition,
    Phase,
    Trigger,
    rule_for,
    transition,
)


@given(st.sampled_from(list(Phase)), st.lists(st.sampled_from(list(Trigger)), max_size=40))
def test_no_illegal_transition_is_ever_applied(start: Phase, triggers: list[Trigger]) -> None:
    phase = start
    for trigger in triggers:
        rule = rule_for(phase, trigger)
        if rule is None:
            with pytest.raises(IllegalTransition):
                transition(phase, trigger)
            continue  # the phase stays what it was
        after = transition(phase, trigger)
        assert phase in rule.sources and after is rule.target
        phase = after


@given(st.sampled_from(sorted(TERMINAL_PHASES)), st.sampled_from(list(Trigger)))
def test_terminal_phases_are_final(phase: Phase, trigger: Trigger) -> None:
    with pytest.raises(IllegalTransition) as info:
        transition(phase, trigger)
    assert info.value.reason == "ILLEGAL_TRANSITION"
    assert info.value.metadata == {"phase": phase.value, "trigger": trigger.value}


def test_unknown_outcome_is_never_collapsed_into_failed() -> None:
    assert rule_for(Phase.UNKNOWN_OUTCOME, Trigger.FAIL) is None
    assert rule_for(Phase.UNKNOWN_OUTCOME, Trigger.EXPIRE) is None
    assert transition(Phase.UNKNOWN_OUTCOME, Trigger.RECONCILE) is Phase.TOOL_STEP


def test_every_rule_has_a_precondition_and_every_phase_is_reachable() -> None:
    assert all(rule.precondition for rule in RULES)
    reachable = {Phase.QUEUED}
    frontier = [Phase.QUEUED]
    while frontier:
        phase = frontier.pop()
        for trigger in Trigger:
            rule = rule_for(phase, trigger)
            if rule is not None and rule.target not in reachable:
                reachable.add(rule.target)
                frontier.append(rule.target)
    assert reachable == set(Phase)


def test_completed_only_from_a_model_step_or_once_resources_are_released() -> None:
    sources = {p for p in Phase if rule_for(p, Trigger.COMPLETE) is not None}
    assert sources == {Phase.MODEL_STEP, Phase.CLEANING_UP}


def test_cleaning_up_leaves_only_to_an_end() -> None:
    targets = {rule.target for rule in RULES if Phase.CLEANING_UP in rule.sources}
    assert targets == {Phase.COMPLETED, Phase.FAILED, Phase.CANCELLED, Phase.EXPIRED}
    assert rule_for(Phase.UNKNOWN_OUTCOME, Trigger.CLOSE) is None  # never closed over an unknown write
    assert rule_for(Phase.CLEANING_UP, Trigger.REQUEST_CANCEL) is None  # the run is ending already
