"""Crash the runtime at every commit point of a refund run, restart it, and check the run.

For each point: the run reaches COMPLETED, the refund landed exactly once in the
tool's real store, the event log is gapless with no duplicated fact, and the
model was never re-asked for a step whose output was already stored.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrt.client import Client, event_type
from agentrt.plugins.demo_tools import count_refunds
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.server.engine._faults import FAULT_EXIT_CODE
from agentrt.testing import ToolHostProcess
from tests.fault.conftest import FakeOpenAI, runtime_env, start_runtime

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
        healthy.stop()
        counters = healthy.counters()
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
    if point in ("tool_request_sent@2", "tool_response_received@2", "before_commit:tool.completed@2"):
        # The refund ran before the crash: the restarted runtime learned it from the ledger.
        assert counters["duplicate_suppressed_count"] == 1
        replayed = [
            e.tool_completed for e in events if e.HasField("tool_completed") and e.tool_completed.replayed
        ]
        assert [c.tool for c in replayed] == ["refund.issue"]


def test_crash_points_are_listed() -> None:
    assert len(CRASH_POINTS) == len(set(CRASH_POINTS)) == 12
