"""Versioned state (R5.6): explicit, idempotent upgraders and the tool contract rule."""

from __future__ import annotations

import pytest

from agentrt.server.core import (
    STATE_VERSION,
    IncompatibleVersion,
    RawEvent,
    StepKind,
    StepStarted,
    compatible_tool_versions,
    upgrade,
)
from agentrt.server.core import events as ev
from agentrt.server.store import decode_event


def test_v1_diagnostic_steps_are_upgraded_and_current_events_are_left_alone() -> None:
    old: list[RawEvent] = [
        (ev.STEP_STARTED, {"step": 3, "kind": "diagnostic", "loop": "identical_call: t", "usage": {}})
    ]
    new: list[RawEvent] = [
        (ev.STEP_STARTED, {"step": 3, "kind": "diagnostic", "reason": "identical_call: t", "usage": {}})
    ]
    assert upgrade(old, from_version=1) == new
    assert upgrade(new, from_version=1) == new  # a mixed log: events appended after the upgrade
    assert upgrade(new, from_version=STATE_VERSION) == new
    # Upgraders work on the raw JSON; the codec decodes what they return.
    (upgraded,) = [decode_event(t, data) for t, data in upgrade(old, from_version=1)]
    assert upgraded == StepStarted(step=3, kind=StepKind.DIAGNOSTIC, reason="identical_call: t")


@pytest.mark.parametrize("version", [0, STATE_VERSION + 1])
def test_a_version_without_a_path_is_refused(version: int) -> None:
    with pytest.raises(IncompatibleVersion) as info:
        upgrade([], from_version=version)
    assert info.value.reason == "incompatible_version"


def test_tool_contracts_are_compatible_within_a_major_version() -> None:
    assert compatible_tool_versions("1", "1.4")
    assert compatible_tool_versions("", "7")
    assert not compatible_tool_versions("1.9", "2.0")
