"""Versioned state (R5.6): explicit upgraders for event logs written by older runtimes.

The log is append-only, so an old run's events stay in their old shape: every load
upgrades them in memory, and events the current runtime appends are already
current. Upgraders must therefore leave current-shape events unchanged. They work on
the parsed JSON, before the store's codec decodes it into events.

History of STATE_VERSION:
1. First version.
2. ``step.started`` of a diagnostic step carries its loop in ``reason`` (was ``loop``);
   ``tool.started`` and ``approval.requested`` carry the tool's ``tool_version``.
3. Money is exact: usages carry integer ``cost_micros`` (was float ``cost_usd``), budgets
   ``max_cost_micros`` (was ``max_cost_usd``). Run rows (usage, budgets) are converted where they
   are read (``Usage.from_json``, ``Budgets.from_json``, the API), since rows are not versioned.
   A step's kind stays the core's word ("model", "diagnostic", "corrective") in the log; the API
   maps it to the ``StepKind`` enum.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentrt.server.core._errors import AgentRtError
from agentrt.server.core._events import STEP_STARTED
from agentrt.server.core._money import upgrade_money_json

STATE_VERSION = 3

# A stored event before it is decoded: its type name and its parsed JSON payload. Upgraders work
# on this shape, since an old payload need not fit the current event classes.
RawEvent = tuple[str, dict[str, Any]]


class IncompatibleVersion(AgentRtError):
    """No upgrader leads from the stored version to this runtime's."""

    reason = "incompatible_version"


def _v1_to_v2(events: list[RawEvent]) -> list[RawEvent]:
    out = []
    for event_type, data in events:
        if event_type == STEP_STARTED and "loop" in data:
            upgraded = {k: v for k, v in data.items() if k != "loop"}
            upgraded.setdefault("reason", data["loop"])
            data = upgraded
        out.append((event_type, data))  # a missing tool_version reads as "unknown": no contract check
    return out


def _v2_to_v3(events: list[RawEvent]) -> list[RawEvent]:
    return [(event_type, upgrade_money_json(data)) for event_type, data in events]


UPGRADERS: dict[int, Callable[[list[RawEvent]], list[RawEvent]]] = {1: _v1_to_v2, 2: _v2_to_v3}


def upgrade(events: list[RawEvent], *, from_version: int, to_version: int = STATE_VERSION) -> list[RawEvent]:
    """The raw events in the shape of ``to_version`` (decode them after this).

    Raises:
        IncompatibleVersion: the log is newer than this runtime, or a step has no upgrader.
    """
    if from_version > to_version:
        raise IncompatibleVersion(f"state version {from_version} is newer than this runtime's {to_version}")
    for version in range(from_version, to_version):
        step = UPGRADERS.get(version)
        if step is None:
            raise IncompatibleVersion(f"no upgrader from state version {version} to {version + 1}")
        events = step(events)
    return events


def compatible_tool_versions(recorded: str, current: str) -> bool:
    """Same major version (the part before the first dot) means the call's contract still holds.

    An unknown recorded version (logs from before versions were recorded) is taken as compatible.
    """
    if not recorded:
        return True
    return recorded.split(".")[0] == current.split(".")[0]
