"""Run control through real processes: loop exits, parallel reads, token and cost budgets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentrt.client import Client, event_type
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import RuntimeProcess, ToolHostProcess, spawn_runtime
from tests.e2e.conftest import agent_toml

LOOKUP = {"text": "checking", "tool_calls": [{"tool": "orders.lookup", "arguments": {"order_id": "A100"}}]}
NAPS = {
    "text": "three naps at once",
    "tool_calls": [{"tool": "sleep.wait", "arguments": {"seconds": s}} for s in (0.6, 0.3, 0.45)],
}


@pytest.fixture
def control_runtime(tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str) -> Iterator[RuntimeProcess]:
    text = (
        f'db_url = "{sqlite_url}"\n[[tool_hosts]]\nname = "local"\naddress = "{tool_host.address}"\n'
        "[prices.priced-model]\ninput_per_mtok = 100000.0\noutput_per_mtok = 100000.0\n"
    )
    text += agent_toml("looper", steps=[LOOKUP] * 8, tools=["orders.lookup"], budgets={"max_model_steps": 20})
    text += agent_toml(
        "napper",
        steps=[NAPS, {"text": "rested"}],
        tools=["sleep.wait"],
        budgets={"max_parallel_tool_calls": 3},
    )
    text += agent_toml(
        "chatty",
        steps=[LOOKUP, {"text": "a long answer " * 50}],
        tools=["orders.lookup"],
        budgets={"max_output_tokens": 10},
    )
    lookups = [
        {"text": "checking", "tool_calls": [{"tool": "orders.lookup", "arguments": {"order_id": f"A10{i}"}}]}
        for i in range(5)
    ]
    text += agent_toml("busy", steps=lookups, tools=["orders.lookup"], budgets={"max_tool_calls": 2})
    text += agent_toml(
        "picky", steps=lookups, tools=["orders.lookup"], budgets={"max_calls_per_tool": {"orders.lookup": 3}}
    )
    text += agent_toml("reader", steps=lookups, tools=["orders.lookup"], budgets={"max_input_tokens": 60})
    text += agent_toml(
        "spender",
        steps=[LOOKUP, LOOKUP, {"text": "done"}],
        tools=["orders.lookup"],
        budgets={"max_cost_usd": 1.0},
    )
    path = tmp_path / "control.toml"
    path.write_text(
        text.replace(
            'provider = "scripted", options', 'provider = "scripted", name = "priced-model", options'
        )
    )
    with spawn_runtime(["--config", str(path), "--listen", "127.0.0.1:0"], cwd=tmp_path) as runtime:
        yield runtime


def run_events(runtime: RuntimeProcess, agent: str) -> list[run_pb2.RunEvent]:
    with Client(runtime.address) as client:
        return [e for e in client.run_agent(agent, "go", timeout=60) if e.seq]


def test_a_repeated_identical_call_loop_is_cut_with_loop_detected(control_runtime: RuntimeProcess) -> None:
    events = run_events(control_runtime, "looper")
    types = [event_type(e) for e in events]
    assert types.count("tool.started") == 2  # the third identical lookup never runs
    diagnostic = [
        e.step_started
        for e in events
        if e.HasField("step_started") and e.step_started.kind == run_pb2.STEP_KIND_DIAGNOSTIC
    ]
    assert len(diagnostic) == 1
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_FAILED
    assert events[-1].run_ended.reason == "loop_detected"
    failed = next(e.run_failed for e in events if e.HasField("run_failed"))
    assert "identical_call: orders.lookup" in failed.message


def test_parallel_read_calls_overlap_in_time_and_keep_call_order(control_runtime: RuntimeProcess) -> None:
    events = run_events(control_runtime, "napper")
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
    started = [e.tool_started for e in events if e.HasField("tool_started")]
    completed = [e.tool_completed for e in events if e.HasField("tool_completed")]
    # Results enter the log in call order even though the 0.3 s nap finished first.
    assert [c.call_id for c in completed] == [s.call_id for s in started]
    spans = [json.loads(c.result_json) for c in completed]
    assert [s["slept"] for s in spans] == [0.6, 0.3, 0.45]
    latest_start = max(s["started_at"] for s in spans)
    earliest_end = min(s["finished_at"] for s in spans)
    assert latest_start < earliest_end, "the three naps did not overlap"
    assert max(s["finished_at"] for s in spans) - min(s["started_at"] for s in spans) < 0.6 + 0.3


def test_token_and_cost_budgets_end_the_run_with_their_reason(control_runtime: RuntimeProcess) -> None:
    chatty = run_events(control_runtime, "chatty")
    assert chatty[-1].run_ended.reason == "budget_exhausted:output_tokens"
    assert chatty[-1].run_ended.phase == run_pb2.RUN_PHASE_FAILED
    spender = run_events(control_runtime, "spender")
    assert spender[-1].run_ended.reason == "budget_exhausted:cost"
    assert spender[-1].run_ended.usage.cost_micros > 1_000_000
    with Client(control_runtime.address) as client:
        run = client.get_run(spender[0].run_id)
    assert run.usage.cost_micros == spender[-1].run_ended.usage.cost_micros and run.usage.input_tokens > 0
    steps = [e for e in spender if e.HasField("model_completed")]
    assert steps[0].model_completed.usage_before.cost_micros == 0
    assert steps[0].model_completed.usage_after.cost_micros > 0


@pytest.mark.parametrize(
    "agent, reason, calls",
    [
        ("busy", "budget_exhausted:tool_calls", 2),
        ("picky", "budget_exhausted:calls_per_tool:orders.lookup", 3),
        ("reader", "budget_exhausted:input_tokens", None),
    ],
)
def test_call_and_input_budgets_end_the_run_with_their_reason(
    control_runtime: RuntimeProcess, agent: str, reason: str, calls: int | None
) -> None:
    events = run_events(control_runtime, agent)
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_FAILED
    assert events[-1].run_ended.reason == reason
    started = [e for e in events if e.HasField("tool_started")]
    if calls is not None:
        assert len(started) == calls
    else:
        assert events[-1].run_ended.usage.input_tokens >= 60
