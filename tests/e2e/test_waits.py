"""Escalation and the partial summary through real processes (issue 11).

- An approval wait past ``[escalation] approval_after_s`` escalates: run.escalated, the run's
  ``needs_attention`` (and the ListRuns filter on it), and the ``escalated_count`` counter.
- A run cancelled after some tool calls says in run.ended and in GetRun what was done and what not.
"""

from __future__ import annotations

import time
from pathlib import Path

from agentrt.client import Client, event_type
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import ToolHostProcess, spawn_runtime
from tests.e2e.conftest import agent_toml
from tests.e2e.test_approvals import STEPS, start_until_paused


def config(tmp_path: Path, sqlite_url: str, tool_host: ToolHostProcess) -> Path:
    text = f'db_url = "{sqlite_url}"\npoll_interval_s = 0.1\n'
    text += f'[[tool_hosts]]\nname = "local"\naddress = "{tool_host.address}"\n'
    text += "[escalation]\napproval_after_s = 1.0\n"
    text += agent_toml(
        "refunder", steps=STEPS, tools=["orders.lookup", "refund.issue"], budgets={"timeout_s": 60}
    )
    nap = {"text": "waiting", "tool_calls": [{"tool": "sleep.wait", "arguments": {"seconds": 60}}]}
    look = {"text": "checking", "tool_calls": [{"tool": "orders.lookup", "arguments": {"order_id": "A100"}}]}
    text += agent_toml(
        "slow",
        steps=[look, nap, {"text": "done"}],
        tools=["orders.lookup", "sleep.wait"],
        budgets={"timeout_s": 60},
    )
    path = tmp_path / "waits.toml"
    path.write_text(text)
    return path


def wait_until(check: object, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_an_approval_wait_past_its_age_escalates_and_is_listed_as_needing_attention(
    tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str
) -> None:
    path = config(tmp_path, sqlite_url, tool_host)
    with spawn_runtime(["--config", str(path), "--listen", "127.0.0.1:0"], cwd=tmp_path) as runtime:
        with Client(runtime.address) as client:
            run_id, approval = start_until_paused(client, "refunder")
            assert not client.get_run(run_id).needs_attention
            wait_until(lambda: client.get_run(run_id).needs_attention)

            run = client.get_run(run_id)
            assert run.phase == run_pb2.RUN_PHASE_WAITING_APPROVAL  # still waiting: escalation ends nothing
            escalated = [e.run_escalated for e in client.stream_events(run_id) if e.HasField("run_escalated")]
            assert len(escalated) == 1 and escalated[0].reason == "approval_age"
            assert (
                escalated[0].approval_id == approval.approval_id
                and escalated[0].age.ToTimedelta().seconds >= 1
            )
            listed = client.list_runs(needs_attention=True).runs
            assert [r.run_id for r in listed] == [run_id]

            client.resolve_approval(
                run_id,
                approval.approval_id,
                approve=True,
                args_hash=approval.args_hash,
                expected_revision=run.revision,
            )
            events = list(client.stream_events(run_id, follow=True, timeout=60))
            assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
            assert not client.get_run(run_id).needs_attention
            assert client.list_runs(needs_attention=True).runs == []
        assert runtime.counters()["escalated_count"] == 1  # scraped while it serves
        runtime.stop()


def test_a_run_cancelled_after_some_calls_says_what_was_done_and_what_was_not(
    tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str
) -> None:
    path = config(tmp_path, sqlite_url, tool_host)
    with (
        spawn_runtime(["--config", str(path), "--listen", "127.0.0.1:0"], cwd=tmp_path) as runtime,
        Client(runtime.address) as client,
    ):
        run_id = client.start_run("slow", "check A100 then wait").run_id
        with client.stream_events(run_id, follow=True, timeout=60) as stream:
            for event in stream:
                if event_type(event) == "tool.started" and event.tool_started.tool == "sleep.wait":
                    break
        client.cancel_run(run_id, reason="enough")
        events = list(client.stream_events(run_id, follow=True, timeout=60))

        ended = events[-1].run_ended
        assert ended.phase == run_pb2.RUN_PHASE_CANCELLED and ended.partial
        assert [(c.tool, c.step) for c in ended.completed_calls] == [("orders.lookup", 2)]
        assert [c.tool for c in ended.not_completed_calls] == ["sleep.wait"]
        assert ended.not_completed_calls[0].detail == "TOOL_ERROR_CODE_CANCELLED"
        assert list(ended.unknown_calls) == []
        run = client.get_run(run_id)
        assert list(run.completed_calls) == list(ended.completed_calls)
        assert list(run.not_completed_calls) == list(ended.not_completed_calls)
