"""R4.3 through real processes: a final answer completes a run only if every check holds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentrt.client import Client, event_type
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import RuntimeProcess, ToolHostProcess, spawn_runtime
from tests.e2e.conftest import agent_toml

LOOKUP = {"text": "checking", "tool_calls": [{"tool": "orders.lookup", "arguments": {"order_id": "A100"}}]}
AGENTS = {
    "promiser": (
        [{"text": "We guarantee a full refund."}],
        'output = { options = { forbidden_phrases = ["guarantee"] } }',
    ),
    "corrector": (
        [{"text": "We guarantee a full refund."}, {"text": "Your refund request is being processed."}],
        'output = { on_failure = "correct", options = { forbidden_phrases = ["guarantee"] } }',
    ),
    "structured": (
        [{"text": "refunded, trust me"}],
        'output = { schema = { type = "object", required = ["refund_id"] } }',
    ),
    "claimer": (
        [LOOKUP, {"text": "Refunded."}],
        'output = { options = { require_successful_tool = "refund.issue" } }',
    ),
}


@pytest.fixture
def runtime(tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str) -> Iterator[RuntimeProcess]:
    text = f'db_url = "{sqlite_url}"\n[[tool_hosts]]\nname = "local"\naddress = "{tool_host.address}"\n'
    for name, (steps, output) in AGENTS.items():
        text += agent_toml(name, steps=steps, tools=["orders.lookup"], budgets={}) + output + "\n"
    path = tmp_path / "completion.toml"
    path.write_text(text)
    with spawn_runtime(["--config", str(path), "--listen", "127.0.0.1:0"], cwd=tmp_path) as process:
        yield process


def run(runtime: RuntimeProcess, agent: str) -> list[run_pb2.RunEvent]:
    with Client(runtime.address) as client:
        return [e for e in client.run_agent(agent, "refund A100", timeout=60) if e.seq]


@pytest.mark.parametrize(
    "agent, reason, detail",
    [
        ("promiser", "guardrail_failed", "forbidden phrases ['guarantee']"),
        ("structured", "output_invalid", "not JSON"),
        ("claimer", "postcondition_failed", "no successful refund.issue"),
    ],
)
def test_a_failed_check_never_yields_completed(
    runtime: RuntimeProcess, agent: str, reason: str, detail: str
) -> None:
    events = run(runtime, agent)
    types = [event_type(e) for e in events]
    assert "run.completed" not in types
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_FAILED and events[-1].run_ended.reason == reason
    assert detail in next(e.run_failed for e in events if e.HasField("run_failed")).message
    with Client(runtime.address) as client:
        stored = client.get_run(events[0].run_id)
    assert stored.phase == run_pb2.RUN_PHASE_FAILED and stored.output == ""


def test_one_corrective_step_can_turn_a_rejected_answer_into_an_accepted_one(runtime: RuntimeProcess) -> None:
    events = run(runtime, "corrector")
    corrective = [
        e.step_started
        for e in events
        if e.HasField("step_started") and e.step_started.kind == run_pb2.STEP_KIND_CORRECTIVE
    ]
    assert len(corrective) == 1 and "guardrail_failed" in corrective[0].reason
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
    assert next(e.run_completed for e in events if e.HasField("run_completed")).output == (
        "Your refund request is being processed."
    )
