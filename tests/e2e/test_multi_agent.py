"""R9.1 through real processes: handoffs (budgeted) and agents as tools (child runs)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentrt.client import Client, event_type
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import RuntimeProcess, ToolHostProcess, spawn_runtime
from tests.e2e.conftest import agent_toml

# Scripted models index their script by the run's model step, whoever is in control.
TRIAGE = [
    {"text": "over to refunds", "tool_calls": [{"tool": "handoff.refunds", "arguments": {"reason": "money"}}]}
]
REFUNDS = [{"text": "(unused)"}, {"text": "Refunds here: your order A100 qualifies."}]
PING_PONG = [
    {"text": "to refunds", "tool_calls": [{"tool": "handoff.bouncer", "arguments": {}}]},
    {"text": "back", "tool_calls": [{"tool": "handoff.pinger", "arguments": {}}]},
    {"text": "again", "tool_calls": [{"tool": "handoff.bouncer", "arguments": {}}]},
]
MANAGER = [
    {
        "text": "asking",
        "tool_calls": [{"tool": "agent.researcher", "arguments": {"input": "status of A100?"}}],
    },
    {"text": "The researcher says it was delivered."},
]
RESEARCHER = [
    {"text": "looking", "tool_calls": [{"tool": "orders.lookup", "arguments": {"order_id": "A100"}}]},
    {"text": "A100 was delivered."},
]
BOSS = [{"text": "delegating", "tool_calls": [{"tool": "agent.napper", "arguments": {"input": "nap"}}]}]
NAPPER = [{"text": "napping", "tool_calls": [{"tool": "sleep.wait", "arguments": {"seconds": 30}}]}]


@pytest.fixture
def runtime(tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str) -> Iterator[RuntimeProcess]:
    text = f'db_url = "{sqlite_url}"\n[[tool_hosts]]\nname = "local"\naddress = "{tool_host.address}"\n'
    agents = [
        ("triage", TRIAGE, [], 'handoffs = ["refunds"]'),
        ("refunds", REFUNDS, ["orders.lookup"], ""),
        ("pinger", PING_PONG, [], 'handoffs = ["bouncer"]'),
        ("bouncer", PING_PONG, [], 'handoffs = ["pinger"]'),
        ("manager", MANAGER, [], 'agent_tools = ["researcher"]'),
        ("researcher", RESEARCHER, ["orders.lookup"], ""),
        ("boss", BOSS, [], 'agent_tools = ["napper"]'),
        ("napper", NAPPER, ["sleep.wait"], ""),
    ]
    for name, steps, tools, extra in agents:
        budgets = {"max_handoffs": 2} if name == "pinger" else {}
        text += agent_toml(name, steps=steps, tools=tools, budgets=budgets) + extra + "\n"
    path = tmp_path / "agents.toml"
    path.write_text(text)
    with spawn_runtime(["--config", str(path), "--listen", "127.0.0.1:0"], cwd=tmp_path) as process:
        yield process


def events_of(client: Client, agent: str) -> list[run_pb2.RunEvent]:
    return [e for e in client.run_agent(agent, "help with A100", timeout=60) if e.seq]


def test_a_handoff_switches_the_agent_inside_the_same_run(runtime: RuntimeProcess) -> None:
    with Client(runtime.address) as client:
        events = events_of(client, "triage")
        runs = client.list_runs().runs
    handoff = next(e.handoff for e in events if e.HasField("handoff"))
    assert (handoff.from_agent, handoff.to_agent, handoff.reason) == ("triage", "refunds", "money")
    assert handoff.usage_after.handoffs == 1
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
    assert next(e.run_completed for e in events if e.HasField("run_completed")).output.startswith(
        "Refunds here"
    )
    assert len(runs) == 1  # one run, no new turn


def test_the_handoff_budget_ends_the_run_with_its_reason(runtime: RuntimeProcess) -> None:
    with Client(runtime.address) as client:
        events = events_of(client, "pinger")
    assert [e.handoff.to_agent for e in events if e.HasField("handoff")] == ["bouncer", "pinger"]
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_FAILED
    assert events[-1].run_ended.reason == "budget_exhausted:handoffs"


def test_an_agent_as_tool_runs_a_child_run_and_returns_its_answer(runtime: RuntimeProcess) -> None:
    with Client(runtime.address) as client:
        events = events_of(client, "manager")
        parent_id = events[0].run_id
        children = list(client.list_runs(agent_name="researcher").runs)
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
    assert len(children) == 1 and children[0].metadata["parent_run_id"] == parent_id
    assert children[0].phase == run_pb2.RUN_PHASE_COMPLETED and children[0].output == "A100 was delivered."
    result = next(e.tool_completed for e in events if e.HasField("tool_completed"))
    assert result.tool == "agent.researcher" and "A100 was delivered." in result.result_json
    # The child's deadline came from the parent's remaining time.
    assert children[0].deadline.ToMilliseconds() <= client_deadline(runtime, parent_id)
    # The child was a registered resource of the parent, released by its own answer: nothing was
    # left for the parent's end to cancel.
    (registered,) = [e.cleanup_registered for e in events if e.HasField("cleanup_registered")]
    assert registered.kind == run_pb2.CLEANUP_KIND_CHILD_RUN and registered.target == children[0].run_id
    assert "run.closing" not in [event_type(e) for e in events]
    with Client(runtime.address) as client:
        assert client.get_run(parent_id).cleanup_status == run_pb2.CLEANUP_STATUS_DONE


def client_deadline(runtime: RuntimeProcess, run_id: str) -> int:
    with Client(runtime.address) as client:
        return int(client.get_run(run_id).deadline.ToMilliseconds())


def test_cancelling_the_parent_cancels_its_child(runtime: RuntimeProcess) -> None:
    with Client(runtime.address) as client:
        parent = client.start_run("boss", "delegate a nap")
        child_id = ""
        for event in client.stream_events(parent.run_id, follow=True, timeout=30):
            if event_type(event) == "tool.started":
                break
        deadline = time.monotonic() + 30
        while not child_id:
            assert time.monotonic() < deadline, "no child run appeared"
            children = client.list_runs(agent_name="napper").runs
            child_id = children[0].run_id if children else ""
            time.sleep(0.02)
        for event in client.stream_events(child_id, follow=True, timeout=30):
            if event_type(event) == "tool.started":
                break
        client.cancel_run(parent.run_id, reason="stop everything")
        parent_events = [e for e in client.stream_events(parent.run_id, follow=True, timeout=30) if e.seq]
        child_events = [e for e in client.stream_events(child_id, follow=True, timeout=30) if e.seq]
    assert parent_events[-1].run_ended.phase == run_pb2.RUN_PHASE_CANCELLED
    assert child_events[-1].run_ended.phase == run_pb2.RUN_PHASE_CANCELLED
    assert parent.run_id in child_events[-1].run_ended.reason
