"""Crash the runtime at every commit point of a refund run, restart it, and check the run.

For each point: the run reaches COMPLETED, the refund landed exactly once in the
tool's real store, the event log is gapless with no duplicated fact, and the
model was never re-asked for a step whose output was already stored.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

import pytest

from agentrt.client import Client, event_type
from agentrt.plugins.demo_tools import count_refunds
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.server.config import AgentConfig
from agentrt.server.engine._faults import FAULT_EXIT_CODE, FaultPlan
from agentrt.server.tools import CallMetadata, ToolOutcome
from agentrt.testing import ToolHostProcess
from agentrt.testing.engine import EngineWorld
from tests.fault.conftest import REFUND_SCRIPT, FakeOpenAI, runtime_env, start_runtime

# The refund is the run's second tool call, hence "@2" on the tool points.
CRASH_POINTS = [
    "before_commit:model.completed",
    "after_commit:model.completed",
    "before_commit:model.completed@2",
    "after_commit:model.completed@2",
    "before_commit:tool.started@2",
    "after_commit:tool.started@2",
    "tool_request_sent@2",
    "tool_response_received@2",
    "before_commit:tool.completed@2",
    "after_commit:tool.completed@2",
    "before_commit:run.ended",
    "after_commit:run.ended",
]
DUPLICATE_EFFECTS: list[int] = []  # per point, refunds beyond one; the summary prints the total


def check_log(events: list[run_pb2.RunEvent]) -> None:
    types = [event_type(e) for e in events]
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "gap or duplicate seq"
    assert types.count("run.ended") == 1 and types.count("run.started") == 1
    steps = [e.model_completed.step for e in events if e.HasField("model_completed")]
    assert len(steps) == len(set(steps)), f"a model step recorded twice: {steps}"
    finished = [
        e.tool_completed.call_id if e.HasField("tool_completed") else e.tool_failed.call_id
        for e in events
        if e.HasField("tool_completed") or e.HasField("tool_failed")
    ]
    assert len(finished) == len(set(finished)), f"a call's result recorded twice: {finished}"


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_crash_at_commit_point_recovers_exactly_once(
    point: str,
    tmp_path: Path,
    refund_host: ToolHostProcess,
    fake_model: tuple[FakeOpenAI, str],
    sqlite_url: str,
) -> None:
    fake, model_url = fake_model
    base = {"db_url": sqlite_url, "tool_host": refund_host.address, "model_url": model_url}
    crashed = start_runtime(tmp_path, runtime_env(**base, fault=point))
    try:
        with Client(crashed.address) as client:
            run_id = client.start_run("refund", "Please refund A100").run_id
        assert crashed.wait_exit(60) == FAULT_EXIT_CODE, crashed.stderr_text()[-2000:]
    finally:
        crashed.close()
    healthy = start_runtime(tmp_path, runtime_env(**base))
    try:
        with Client(healthy.address) as client:
            # Live text deltas (seq 0) are best-effort and not part of the log.
            events = [e for e in client.stream_events(run_id, follow=True, timeout=60) if e.seq]
            run = client.get_run(run_id)
        counters = healthy.counters()  # scraped while it serves
        healthy.stop()
    finally:
        healthy.close()

    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED, [event_type(e) for e in events]
    assert run.phase == run_pb2.RUN_PHASE_COMPLETED and run.output == "Refunded 30.00 for A100."
    check_log(events)
    refunds = count_refunds(refund_host.data_dir / "refunds.sqlite")
    DUPLICATE_EFFECTS.append(max(0, refunds - 1))
    assert refunds == 1
    model_steps = [e for e in events if e.HasField("model_completed")]
    for index, event in enumerate(model_steps, start=1):
        # Event times are whole milliseconds: the model's answer can fall in the one it was stored in.
        stored_at = (event.time.ToMilliseconds() + 1) / 1000
        assert fake.steps_asked_after(index, stored_at) == 0, f"model re-asked for stored step {index}"
    assert len(model_steps) == 3
    # A crash before the commit holding a step's answer loses it: that step, and only it, was
    # asked again (the same conversation, so the same answer); every other step was asked once.
    asked = Counter(step for _, step in fake.requests)
    reasked = reasked_step(point)
    assert asked == {1: 1, 2: 1, 3: 1} | ({reasked: 2} if reasked else {}), (point, asked)
    if point in ("tool_request_sent@2", "tool_response_received@2", "before_commit:tool.completed@2"):
        # The refund ran before the crash: the restarted runtime learned it from the ledger.
        assert counters["duplicate_suppressed_count"] == 1
        replayed = [
            e.tool_completed for e in events if e.HasField("tool_completed") and e.tool_completed.replayed
        ]
        assert [c.tool for c in replayed] == ["refund.issue"]


class RecordingPlan(FaultPlan):
    """Fires nothing; records every point a run reaches, named as CRASH_POINTS names them, and
    which of them one commit shares (a crash at any of those is the same crash)."""

    def __init__(self) -> None:
        super().__init__("")
        self.reached: list[str] = []
        self.commits: list[tuple[str, ...]] = []
        self._counts: Counter[str] = Counter()

    @property
    def armed(self) -> bool:
        return True  # the tool step checks it before the "request sent" point

    def hit(self, point: str) -> None:
        self._counts[point] += 1
        count = self._counts[point]
        self.reached.append(point if count == 1 else f"{point}@{count}")

    def around_commit(self, when: str, event_types: Iterable[str]) -> None:
        first = len(self.reached)
        for kind in dict.fromkeys(event_types):
            self.hit(f"{when}_commit:{kind}")
        self.commits.append(tuple(self.reached[first:]))


async def _points_of_a_refund_run() -> RecordingPlan:
    """The refund scenario of this suite, in-process: a lookup, the refund (a write), the answer."""

    def answer(result: str) -> Callable[[str, CallMetadata], Awaitable[ToolOutcome]]:
        async def tool(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
            return ToolOutcome(result, None)

        return tool

    world = EngineWorld(agent=AgentConfig(tools=["orders.lookup", "refund.issue"]))
    world.tools.add("orders.lookup", answer('{"status": "broken"}'), side_effect="read_only")
    world.tools.add("refund.issue", answer('{"refunded": true}'), side_effect="write")
    for step, move in sorted(REFUND_SCRIPT.items()):
        if "tool" in move:
            world.models.answer(tool_calls=[(f"call_{step}", move["tool"], json.dumps(move["arguments"]))])
        else:
            world.models.answer(text=move["text"])
    plan = RecordingPlan()
    world.fault_plan = plan
    run_id = world.create_run("Please refund A100")
    await world.drive(run_id)
    assert world.log.phase(run_id) == "COMPLETED"
    return plan


@functools.cache
def _refund_run_points() -> RecordingPlan:
    return asyncio.run(_points_of_a_refund_run())


def reasked_step(point: str) -> int | None:
    """The model step a crash at ``point`` has asked again: the step whose answer (model.completed)
    was to be committed in the commit the crash came before; None for any other point."""
    for names in _refund_run_points().commits:
        if point in names and point.startswith("before_commit:"):
            answers = [n for n in names if n.startswith("before_commit:model.completed")]
            if answers:
                _, _, count = answers[0].partition("@")
                return int(count or 1)
    return None


def test_every_crash_point_is_reached_by_a_refund_run_and_covers_its_commits() -> None:
    plan = _refund_run_points()

    assert len(CRASH_POINTS) == len(set(CRASH_POINTS))
    # A point no refund run reaches (renamed, miscounted) would crash nothing: found here, fast.
    assert [point for point in CRASH_POINTS if point not in plan.reached] == []
    # Every commit holding a model answer, the write's start or result, or the run's end is
    # crashed at, before and after (by any of the names a shared commit goes by).
    write = ("tool.started@2", "tool.completed@2")
    for names in plan.commits:
        if any(n.endswith(write) or ":model.completed" in n or ":run.ended" in n for n in names):
            assert set(names) & set(CRASH_POINTS), f"no crash point for the commit {names}"
    # And both sides of the refund's request: sent and not answered, answered and not recorded.
    sends = [p for p in plan.reached if p.startswith(("tool_request_sent", "tool_response_received"))]
    assert [p for p in sends if p.endswith("@2") and p not in CRASH_POINTS] == []
    # The points whose crash loses an answer: before each commit of a model answer.
    assert {p: reasked_step(p) for p in CRASH_POINTS if reasked_step(p)} == {
        "before_commit:model.completed": 1,
        "before_commit:model.completed@2": 2,
        "before_commit:tool.started@2": 2,  # committed with step 2's answer
        "before_commit:run.ended": 3,  # committed with the final answer
    }
