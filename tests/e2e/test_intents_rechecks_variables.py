"""Intent-level dedup, re-checks of approved calls and run variables, through real processes.

A runtime and a demo tool host (refund.issue declares ``order_id`` as its session-wide intent
key; orders.lookup sets the run variables ``order_id`` and ``order_status``; the shipped refund
policy asks for approval over 25.00 and re-checks approved refunds through ``orders.lookup``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from agentrt.client import Client, event_type
from agentrt.plugins.demo_tools import count_refunds, set_order_status
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import RuntimeProcess, ToolHostProcess, spawn_runtime
from tests.e2e.conftest import agent_toml

LOOKUP = {"tool": "orders.lookup", "arguments": {"order_id": "A100"}}


def refund(amount: float) -> dict[str, Any]:
    return {"tool": "refund.issue", "arguments": {"order_id": "A100", "amount": amount, "reason": "broken"}}


def echo(variables: dict[str, Any]) -> dict[str, Any]:
    return {"tool": "noop.echo", "arguments": {"_set_variables": variables}}


AGENTS: dict[str, list[dict[str, Any]]] = {
    # The model asks for the same refund in two steps.
    "twice": [
        {"text": "checking", "tool_calls": [LOOKUP]},
        {"text": "refunding", "tool_calls": [refund(12.5)]},
        {"text": "refunding again, to be sure", "tool_calls": [refund(12.5)]},
        {"text": "Refunded 12.50 for A100."},
    ],
    # One refund per turn: the second turn of a session asks again.
    "once": [{"text": "refunding", "tool_calls": [refund(12.5)]}, {"text": "Refunded."}],
    # A small refund, then a larger one of the same order that needs a person.
    "more": [
        {"text": "refunding", "tool_calls": [refund(12.5)]},
        {"text": "refunding more", "tool_calls": [refund(30.0)]},
        {"text": "Done."},
    ],
    "approved": [
        {"text": "checking", "tool_calls": [LOOKUP]},
        {"text": "refunding", "tool_calls": [refund(30.0)]},
        {"text": "Handled."},
    ],
    "hostile": [
        {"text": "many", "tool_calls": [echo({f"v{i}": i for i in range(65)})]},
        {"text": "large", "tool_calls": [echo({"note": "x" * 2000})]},
        {"text": "secret", "tool_calls": [echo({"api_token": "abc"})]},
        {"text": "fine", "tool_calls": [echo({"ticket": "T-1", "verified": True, "score": 0.5})]},
        {"text": "Done."},
    ],
}


def config(tmp_path: Path, sqlite_url: str, tool_host: ToolHostProcess) -> list[str]:
    text = f'db_url = "{sqlite_url}"\npoll_interval_s = 0.1\n'
    text += f'[[tool_hosts]]\nname = "local"\naddress = "{tool_host.address}"\n'
    for name, steps in AGENTS.items():
        tools = ["orders.lookup", "refund.issue", "noop.echo"]
        text += agent_toml(name, steps=steps, tools=tools, budgets={"timeout_s": 60})
    path = tmp_path / "intents.toml"
    path.write_text(text)
    return ["--config", str(path), "--listen", "127.0.0.1:0"]


@pytest.fixture
def runtime(tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str) -> Iterator[RuntimeProcess]:
    with spawn_runtime(config(tmp_path, sqlite_url, tool_host), cwd=tmp_path) as process:
        yield process


def stored(client: Client, run_id: str) -> list[run_pb2.RunEvent]:
    return [e for e in client.stream_events(run_id, follow=True, timeout=60) if e.seq]


def refunds(tool_host: ToolHostProcess) -> int:
    return count_refunds(tool_host.data_dir)


def variables(run: run_pb2.Run) -> dict[str, Any]:
    return {name: json_format.MessageToDict(value) for name, value in run.variables.items()}


def pause(client: Client, agent: str) -> tuple[str, run_pb2.ApprovalRequested]:
    events = list(client.run_agent(agent, "refund A100", timeout=60))
    assert event_type(events[-2]) == "approval.requested", [event_type(e) for e in events]
    return events[0].run_id, events[-2].approval_requested


def test_the_same_refund_asked_in_two_steps_is_issued_once(
    runtime: RuntimeProcess, tool_host: ToolHostProcess
) -> None:
    with Client(runtime.address) as client:
        run_id = client.start_run("twice", "refund A100").run_id
        events = stored(client, run_id)
        run = client.get_run(run_id)
    counters = runtime.counters()  # scraped while it serves
    runtime.stop()

    assert run.phase == run_pb2.RUN_PHASE_COMPLETED
    assert refunds(tool_host) == 1
    completed = [e.tool_completed for e in events if e.HasField("tool_completed")]
    first, again = (c for c in completed if c.tool == "refund.issue")
    assert not first.deduplicated and again.deduplicated and not again.replayed
    assert again.result_json == first.result_json
    assert again.duplicate_of.call_id == first.call_id and again.duplicate_of.run_id == run_id
    assert counters["duplicate_suppressed_count"] == 1
    # The run carries the order it is about, set by orders.lookup (versioned as an event).
    assert variables(run) == {"order_id": "A100", "order_status": "delivered"}
    (set_,) = [e.variables_set for e in events if e.HasField("variables_set")]
    assert set_.tool == "orders.lookup" and not set_.refused_reason


def test_a_later_turn_of_the_session_asking_again_gets_the_first_refund(
    runtime: RuntimeProcess, tool_host: ToolHostProcess
) -> None:
    with Client(runtime.address) as client:
        for turn in range(2):
            events = [
                e for e in client.run_agent("once", "refund A100", session_id="s1", timeout=60) if e.seq
            ]
            assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
            (completed,) = [e.tool_completed for e in events if e.HasField("tool_completed")]
            assert completed.deduplicated == (turn == 1)
        # Another session is another scope.
        events = [e for e in client.run_agent("once", "refund A100", session_id="s2", timeout=60) if e.seq]
        (completed,) = [e.tool_completed for e in events if e.HasField("tool_completed")]
        assert not completed.deduplicated
    assert refunds(tool_host) == 2


def test_only_an_approval_with_override_repeats_an_intent(
    runtime: RuntimeProcess, tool_host: ToolHostProcess
) -> None:
    outcomes = []
    with Client(runtime.address) as client:
        for override in (False, True):
            run_id, approval = pause(client, "more")
            client.resolve_approval(
                run_id,
                approval.approval_id,
                approve=True,
                args_hash=approval.args_hash,
                expected_revision=client.get_run(run_id).revision,
                override_intent=override,
            )
            events = stored(client, run_id)
            assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
            resolved = next(e.approval_resolved for e in events if e.HasField("approval_resolved"))
            assert resolved.override_intent == override
            last = [e.tool_completed for e in events if e.HasField("tool_completed")][-1]
            outcomes.append(last.deduplicated)
    # Without the override the approved refund was answered with the run's first one.
    assert outcomes == [True, False]
    assert refunds(tool_host) == 3  # 12.50 in each run, and the overridden 30.00


def test_an_approved_refund_of_an_order_cancelled_meanwhile_never_runs(
    runtime: RuntimeProcess, tool_host: ToolHostProcess
) -> None:
    with Client(runtime.address) as client:
        run_id, approval = pause(client, "approved")
        # The approver sees what the run knew: the order and its status then.
        assert json_format.MessageToDict(approval)["variables"] == {
            "order_id": "A100",
            "order_status": "delivered",
        }
        assert variables(client.get_run(run_id)) == {"order_id": "A100", "order_status": "delivered"}
        set_order_status(tool_host.data_dir, "A100", "cancelled")  # the shop cancels it meanwhile
        client.resolve_approval(
            run_id,
            approval.approval_id,
            approve=True,
            args_hash=approval.args_hash,
            expected_revision=client.get_run(run_id).revision,
        )
        events = stored(client, run_id)
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
    failed = [e.tool_failed for e in events if e.HasField("tool_failed")]
    assert [f.tool for f in failed] == ["refund.issue"]
    assert failed[0].error.message == (
        "vetoed: order A100 was cancelled (it was delivered when the run looked it up); "
        "a cancelled order is not refunded"
    )
    assert refunds(tool_host) == 0
    # The model's next step saw why (the scripted model answered after it).
    steps = [e.model_completed for e in events if e.HasField("model_completed")]
    assert steps[-1].text == "Handled."


def test_hostile_variables_are_refused_with_a_clear_reason_and_the_run_goes_on(
    runtime: RuntimeProcess,
) -> None:
    with Client(runtime.address) as client:
        run_id = client.start_run("hostile", "go").run_id
        events = stored(client, run_id)
        run = client.get_run(run_id)
    assert run.phase == run_pb2.RUN_PHASE_COMPLETED
    reasons = [e.variables_set.refused_reason for e in events if e.HasField("variables_set")]
    assert reasons == [
        "variables refused: 65 variables asked for; at most 64",
        "variables refused: note: the string is over 1024 bytes",
        "variables refused: name 'api_token' looks like a secret's; run variables are never secrets",
        "",
    ]
    assert variables(run) == {"ticket": "T-1", "verified": True, "score": 0.5}
    assert json.loads(json_format.MessageToJson(run))["variables"]["verified"] is True
