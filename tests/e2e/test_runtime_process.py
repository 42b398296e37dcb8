"""The runtime and a tool host as real processes over loopback, driven through the client library."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from agentrt.client import Client, RPCError, event_type
from agentrt.plugins.demo_tools import count_refunds
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import RuntimeProcess, ToolHostProcess, spawn_runtime
from tests.e2e.conftest import write_config

EXPECTED = [
    "run.started",
    "step.started",
    "model.completed",
    "tool.started",
    "tool.completed",
    "variables.set",  # orders.lookup sets the run variables order_id and order_status
    "step.started",
    "model.completed",
    "tool.started",
    "tool.completed",
    "step.started",
    "model.completed",
    "run.completed",
    "run.ended",
]


def refunds(tool_host: ToolHostProcess) -> int:
    path = tool_host.data_dir / "refunds.sqlite"
    return count_refunds(path) if path.exists() else 0


def wait_for_log(tool_host: ToolHostProcess, word: str, timeout: float = 10.0) -> list[str]:
    path = tool_host.data_dir / "sleep_events.log"
    deadline = time.monotonic() + timeout
    while True:
        words = path.read_text().split() if path.exists() else []
        if word in words or time.monotonic() > deadline:
            assert word in words, words
            return words
        time.sleep(0.05)


def wait_for_event(client: Client, run_id: str, wanted: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    for event in client.stream_events(run_id, follow=True, timeout=timeout):
        if event_type(event) == wanted:
            return
        assert time.monotonic() < deadline, f"no {wanted} within {timeout}s"
    raise AssertionError(f"stream ended without {wanted}")


def test_run_agent_streams_the_whole_run_and_persists_it(
    runtime: RuntimeProcess, tool_host: ToolHostProcess
) -> None:
    with Client(runtime.address) as client:
        events = list(client.run_agent("refund", "please refund A100", timeout=60))
        assert [event_type(e) for e in events] == EXPECTED
        run_id = events[0].run_id
        assert [e.seq for e in events] == list(range(1, len(EXPECTED) + 1))
        assert all(e.run_id == run_id for e in events)
        started = [e.tool_started for e in events if e.HasField("tool_started")]
        assert [s.tool for s in started] == ["orders.lookup", "refund.issue"]
        assert len({s.idempotency_key for s in started}) == 2
        completed = [e.tool_completed for e in events if e.HasField("tool_completed")]
        assert json.loads(completed[1].result_json)["amount"] == 12.5
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
        assert events[-1].run_ended.partial is False

        run = client.get_run(run_id)
        assert run.phase == run_pb2.RUN_PHASE_COMPLETED
        assert run.output == "Refunded 12.50 for A100." and run.reason == "final_answer"
        assert run.usage.model_steps == 3 and run.usage.tool_calls == 2
        assert run.last_seq == len(EXPECTED)
        assert run.budgets.max_model_steps == 6
        assert refunds(tool_host) == 1

        # From any seq, replay returns exactly the remaining events, with and without follow.
        for after in range(len(EXPECTED) + 1):
            tail = list(client.stream_events(run_id, after_seq=after, timeout=10))
            assert [e.seq for e in tail] == list(range(after + 1, len(EXPECTED) + 1))
            assert [e.SerializeToString(deterministic=True) for e in tail] == [
                e.SerializeToString(deterministic=True) for e in events[after:]
            ]
        followed = list(client.stream_events(run_id, after_seq=5, follow=True, timeout=10))
        assert [e.seq for e in followed] == list(range(6, len(EXPECTED) + 1))

        listed = client.list_runs()
        assert [r.run_id for r in listed.runs] == [run_id]


def test_request_key_attaches_to_the_same_run_and_never_acts_twice(
    runtime: RuntimeProcess, tool_host: ToolHostProcess
) -> None:
    with Client(runtime.address) as client:
        first = list(client.run_agent("refund", "refund A100", request_key="order-A100", timeout=60))
        again = list(client.run_agent("refund", "refund A100", request_key="order-A100", timeout=60))
        assert first[0].run_id == again[0].run_id
        assert [e.seq for e in again] == [e.seq for e in first]
        started = client.start_run("refund", "refund A100", request_key="order-A100")
        assert started.run_id == first[0].run_id
        assert len(client.list_runs().runs) == 1
        assert refunds(tool_host) == 1


def test_model_step_budget_override_fails_the_run_with_its_reason(runtime: RuntimeProcess) -> None:
    with Client(runtime.address) as client:
        events = list(
            client.run_agent("refund", "refund A100", budgets=run_pb2.Budgets(max_model_steps=1), timeout=60)
        )
        ended = events[-1].run_ended
        assert ended.phase == run_pb2.RUN_PHASE_FAILED
        assert ended.reason == "budget_exhausted:model_steps" and ended.partial is True
        assert [event_type(e) for e in events].count("model.completed") == 1


def test_run_deadline_ends_a_run_expired_while_a_tool_sleeps(
    runtime: RuntimeProcess, tool_host: ToolHostProcess
) -> None:
    budgets = run_pb2.Budgets()
    budgets.timeout.FromSeconds(2)
    with Client(runtime.address) as client:
        begun = time.monotonic()
        events = list(client.run_agent("sleeper", "nap", budgets=budgets, timeout=30))
        assert time.monotonic() - begun < 15
        ended = events[-1].run_ended
        assert ended.phase == run_pb2.RUN_PHASE_EXPIRED and ended.reason == "deadline_exceeded"
        log = (tool_host.data_dir / "sleep_events.log").read_text().split()
        assert "started" in log and "finished" not in log


def test_cancel_stops_the_run_and_the_plugin_observes_it(
    runtime: RuntimeProcess, tool_host: ToolHostProcess
) -> None:
    with Client(runtime.address) as client:
        run = client.start_run("sleeper", "nap")
        wait_for_event(client, run.run_id, "tool.started")
        cancelled = client.cancel_run(run.run_id, reason="user changed their mind")
        assert cancelled.phase == run_pb2.RUN_PHASE_CANCEL_REQUESTED
        events = list(client.stream_events(run.run_id, follow=True, timeout=30))
        types = [event_type(e) for e in events]
        assert types[-4:] == ["tool.failed", "cancel.requested", "run.cancelled", "run.ended"]
        ended = events[-1].run_ended
        assert ended.phase == run_pb2.RUN_PHASE_CANCELLED
        assert ended.reason == "user changed their mind" and ended.partial is True
        assert "model.completed" not in types[types.index("tool.started") :]
        assert client.get_run(run.run_id).phase == run_pb2.RUN_PHASE_CANCELLED
        # The tool host sees the gRPC cancellation on its own time: poll its log, bounded.
        log = wait_for_log(tool_host, "cancelled")
        assert log[0] == "started" and "finished" not in log
        with pytest.raises(RPCError) as info:
            client.cancel_run(run.run_id)
        assert (
            info.value.code == grpc.StatusCode.FAILED_PRECONDITION
            and info.value.reason == "RUN_ALREADY_ENDED"
        )


def test_malformed_tool_arguments_go_back_to_the_model_and_the_tool_never_runs(
    runtime: RuntimeProcess, tool_host: ToolHostProcess
) -> None:
    with Client(runtime.address) as client:
        events = list(client.run_agent("bad-args", "refund minus five", timeout=60))
        failed = [e.tool_failed for e in events if e.HasField("tool_failed")]
        assert len(failed) == 1 and failed[0].error.code == 1  # TOOL_ERROR_CODE_INVALID_INPUT
        assert "amount" in failed[0].error.details_json
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
        assert refunds(tool_host) == 0


def test_bad_requests_get_clear_statuses_and_write_nothing(runtime: RuntimeProcess) -> None:
    with Client(runtime.address) as client:
        with pytest.raises(RPCError) as info:
            client.start_run("no-such-agent", "hi")
        assert info.value.code == grpc.StatusCode.NOT_FOUND and info.value.reason == "AGENT_NOT_FOUND"
        with pytest.raises(RPCError) as info:
            list(client.run_agent("no-such-agent", "hi", timeout=10))
        assert info.value.code == grpc.StatusCode.NOT_FOUND
        with pytest.raises(RPCError) as info:
            client.start_run("refund", "x" * 4096)
        assert (
            info.value.code == grpc.StatusCode.INVALID_ARGUMENT and info.value.reason == "PAYLOAD_TOO_LARGE"
        )
        assert any(
            getattr(d, "field_violations", None) and d.field_violations[0].field == "input"
            for d in info.value.details
        )
        with pytest.raises(RPCError) as info:
            client.start_run("refund", "")
        assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(RPCError) as info:
            client.start_run("refund", "hi", budgets=run_pb2.Budgets(max_model_steps=100000))
        assert info.value.reason == "BUDGET_OVER_LIMIT"
        inline = run_pb2.AgentSpec(name="inline", tools=["no.such.tool"])
        with pytest.raises(RPCError) as info:
            client.start_run(input="hi", agent=inline)
        assert info.value.code == grpc.StatusCode.PERMISSION_DENIED  # off unless configured (R10.2)
        assert info.value.reason == "INLINE_AGENTS_DISABLED"
        for call in (
            lambda: client.get_run("nope"),
            lambda: list(client.stream_events("nope", timeout=5)),
            lambda: client.cancel_run("nope"),
        ):
            with pytest.raises(RPCError) as info:
                call()
            assert info.value.code == grpc.StatusCode.NOT_FOUND and info.value.reason == "RUN_NOT_FOUND"
        with pytest.raises(RPCError) as info:
            client.list_runs(page_token="garbage")
        assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert len(client.list_runs().runs) == 0


def test_bad_config_exits_2_with_a_clear_message_and_writes_nothing(
    tmp_path: Path, tool_host: ToolHostProcess
) -> None:
    db = tmp_path / "never.sqlite"
    cases = {
        "bad.toml": 'db_url = "sqlite:///never.sqlite"\nlisten = "nowhere"\n',
        "badbudget.toml": (
            f'db_url = "sqlite:///{db}"\n[agents.a]\ntools = []\nbudgets = {{ max_model_steps = 0 }}\n'
        ),
        "unknowntool.toml": (
            f'db_url = "sqlite:///{db}"\n[[tool_hosts]]\nname = "h"\n'
            f'address = "{tool_host.address}"\n[agents.a]\ntools = ["nope.tool"]\n'
            'model = { provider = "scripted", options = { steps = [] } }\n'
        ),
        "syntax.toml": "db_url = [",
        "badmodel.toml": f'db_url = "sqlite:///{db}"\n[agents.a]\nmodel = {{ provider = "nope" }}\n',
    }
    expected = {
        "bad.toml": "listen",
        "badbudget.toml": "agents.a.budgets.max_model_steps",
        "unknowntool.toml": "nope.tool",
        "syntax.toml": "not valid TOML",
        "badmodel.toml": "unusable model",
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        done = subprocess.run(
            [sys.executable, "-m", "agentrt.server", "--config", str(tmp_path / name)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, (name, done.stderr)
        assert expected[name] in done.stderr, (name, done.stderr)
    assert not (tmp_path / "never.sqlite").exists()


def test_the_same_run_on_postgresql(tmp_path: Path, tool_host: ToolHostProcess, pg_url: str) -> None:
    config = write_config(tmp_path / "pg.toml", db_url=pg_url, tool_host_address=tool_host.address)
    with (
        spawn_runtime(["--config", str(config), "--listen", "127.0.0.1:0"], cwd=tmp_path) as runtime,
        Client(runtime.address) as client,
    ):
        events = list(client.run_agent("refund", "please refund A100", timeout=60))
        assert [event_type(e) for e in events] == EXPECTED
        assert client.get_run(events[0].run_id).phase == run_pb2.RUN_PHASE_COMPLETED
        tail = list(client.stream_events(events[0].run_id, after_seq=7, timeout=10))
        assert [e.seq for e in tail] == list(range(8, len(EXPECTED) + 1))
    assert refunds(tool_host) == 1
