"""A model's call to a tool its agent was not given never runs (R10.2, invariant §11.9).

Real runtime and tool host processes: the refund plugin's own ledger and the tool host's
InvokeTool counter show that nothing reached the host, not only the run's events.
"""

from __future__ import annotations

import ast
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentrt.client import Client
from agentrt.plugins.demo_tools import SLEEP_LOG_FILE, count_refunds
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.testing import RuntimeProcess, ToolHostProcess, spawn_runtime
from tests.e2e.conftest import agent_toml, write_config
from tests.e2e.test_runtime_process import wait_for_log

REFUND = {"tool": "refund.issue", "arguments": {"order_id": "A100", "amount": 12.5, "reason": "broken"}}
ECHO = {"tool": "noop.echo", "arguments": {"text": "hi"}}
LOOKUP = {"tool": "orders.lookup", "arguments": {"order_id": "A100"}}
# Scripted models index their script by the run's model step, whoever is in control.
AGENTS: list[tuple[str, list[dict[str, Any]], list[str], str]] = [
    (
        "echoer",
        [{"text": "refund and echo", "tool_calls": [REFUND, ECHO]}, {"text": "Could not refund; echoed."}],
        ["noop.echo"],
        "",
    ),
    ("stubborn", [{"text": "again", "tool_calls": [REFUND]}] * 6, ["noop.echo"], ""),
    (
        "triage",
        [{"text": "over to the clerk", "tool_calls": [{"tool": "handoff.clerk", "arguments": {}}]}],
        ["refund.issue"],  # triage could refund; the clerk it hands to cannot
        'handoffs = ["clerk"]',
    ),
    (
        "clerk",
        [
            {"text": "(unused)"},
            {"text": "refund and look up", "tool_calls": [REFUND, LOOKUP]},
            {"text": "Done."},
        ],
        ["orders.lookup"],
        "",
    ),
]


@pytest.fixture
def runtime(tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str) -> Iterator[RuntimeProcess]:
    text = f'db_url = "{sqlite_url}"\n[[tool_hosts]]\nname = "local"\naddress = "{tool_host.address}"\n'
    for name, steps, tools, extra in AGENTS:
        text += agent_toml(name, steps=steps, tools=tools, budgets={"timeout_s": 30}) + extra + "\n"
    path = tmp_path / "allow.toml"
    path.write_text(text)
    with spawn_runtime(["--config", str(path), "--listen", "127.0.0.1:0"], cwd=tmp_path) as process:
        yield process


def host_counters(host: ToolHostProcess) -> dict[str, int]:
    """The counters the tool host logs when it stops: ``invocations`` counts every InvokeTool."""
    host.terminate()
    assert host.wait(timeout=15) == 0
    line = next(x for x in reversed(host.stderr_text().splitlines()) if "stopped; counters:" in x)
    counters: dict[str, int] = ast.literal_eval(line.split("stopped; counters:", 1)[1].strip())
    return counters


def run_events(client: Client, agent: str) -> list[run_pb2.RunEvent]:
    return [e for e in client.run_agent(agent, "refund A100", timeout=60) if e.seq]


def refused_calls(events: list[run_pb2.RunEvent]) -> list[run_pb2.ToolFailed]:
    return [
        e.tool_failed
        for e in events
        if e.HasField("tool_failed") and e.tool_failed.error.code == tool_pb2.TOOL_ERROR_CODE_NOT_ALLOWED
    ]


def test_a_tool_outside_the_agents_list_fails_not_allowed_and_the_run_goes_on(
    runtime: RuntimeProcess, tool_host: ToolHostProcess
) -> None:
    with Client(runtime.address) as client:
        events = run_events(client, "echoer")
    refused = refused_calls(events)
    assert [r.tool for r in refused] == ["refund.issue"]
    assert "refund.issue" in refused[0].error.message and "echoer" in refused[0].error.message
    started = [e.tool_started.tool for e in events if e.HasField("tool_started")]
    assert started == ["noop.echo"]  # the refund never started
    completed = [e.tool_completed.tool for e in events if e.HasField("tool_completed")]
    assert completed == ["noop.echo"]
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
    assert events[-1].run_ended.usage.tool_calls == 1  # the refused call is not a tool call
    assert next(e.run_completed for e in events if e.HasField("run_completed")).output == (
        "Could not refund; echoed."
    )
    assert count_refunds(tool_host.data_dir) == 0
    assert host_counters(tool_host).get("invocations", 0) == 1  # only the echo reached the host


def test_a_model_that_keeps_calling_it_ends_loop_detected_with_nothing_run(
    runtime: RuntimeProcess, tool_host: ToolHostProcess
) -> None:
    with Client(runtime.address) as client:
        events = run_events(client, "stubborn")
    assert len(refused_calls(events)) == 3
    assert not [e for e in events if e.HasField("tool_started")]
    diagnostic = [
        e.step_started
        for e in events
        if e.HasField("step_started") and e.step_started.kind == run_pb2.STEP_KIND_DIAGNOSTIC
    ]
    assert len(diagnostic) == 1 and "NOT_ALLOWED" in diagnostic[0].reason
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_FAILED
    assert events[-1].run_ended.reason == "loop_detected" and not events[-1].run_ended.partial
    assert count_refunds(tool_host.data_dir) == 0
    assert host_counters(tool_host).get("invocations", 0) == 0


def test_after_a_handoff_the_new_agents_list_is_enforced(
    runtime: RuntimeProcess, tool_host: ToolHostProcess
) -> None:
    with Client(runtime.address) as client:
        events = run_events(client, "triage")
    assert [e.handoff.to_agent for e in events if e.HasField("handoff")] == ["clerk"]
    refused = refused_calls(events)
    assert [r.tool for r in refused] == ["refund.issue"] and "clerk" in refused[0].error.message
    assert [e.tool_started.tool for e in events if e.HasField("tool_started")] == ["orders.lookup"]
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
    assert count_refunds(tool_host.data_dir) == 0
    assert host_counters(tool_host).get("invocations", 0) == 1


def test_a_started_call_to_a_tool_the_agent_lacks_is_never_sent_by_a_recovering_runtime(
    tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str
) -> None:
    # Defence in depth behind the decider: a log that already holds tool.started for a tool the
    # agent lacks (here: the agent's stored tool list was narrowed while the call was in flight).
    config = write_config(tmp_path / "rt.toml", db_url=sqlite_url, tool_host_address=tool_host.address)
    args = ["--config", str(config), "--listen", "127.0.0.1:0"]
    with spawn_runtime(args, cwd=tmp_path) as first, Client(first.address) as client:
        run_id = client.start_run("sleeper", "nap").run_id
        for event in client.stream_events(run_id, follow=True, timeout=30):
            if event.HasField("tool_started"):
                break
        wait_for_log(tool_host, "started")
        first.kill()  # the call stays started, without a result, in the log
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as db:
        db.execute(
            "UPDATE runs SET agent_spec = json_set(agent_spec, '$.config.tools', json('[]'), "
            "'$.peers.sleeper.tools', json('[]')) WHERE run_id = ?",
            (run_id,),
        )
    with spawn_runtime(args, cwd=tmp_path) as second, Client(second.address) as client:
        events = [e for e in client.stream_events(run_id, follow=True, timeout=60) if e.seq]
    refused = refused_calls(events)
    assert [r.tool for r in refused] == ["sleep.wait", "sleep.wait"]  # the recovered call, then a new one
    started = [e.tool_started.call_id for e in events if e.HasField("tool_started")]
    assert started == [refused[0].call_id]  # only the call the first runtime had started
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
    words = (tool_host.data_dir / SLEEP_LOG_FILE).read_text().split()
    assert words.count("started") == 1  # the tool host never saw the call again
