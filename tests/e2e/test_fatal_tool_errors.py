"""Tool errors that end a run, over the real wire (R6.3): UNAUTHORIZED and KEY_CONFLICT.

A runtime process, a tool host process and a fake OpenAI server. The tool's own UNAUTHORIZED
ends the run FAILED ``tool_unauthorized:<tool>``; a host that finds the run's idempotency key
already used with other arguments answers KEY_CONFLICT, and the run ends FAILED
``idempotency_conflict`` without the write running. Neither is handed back to the model.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentrt.client import Client, event_type
from agentrt.plugins.fault_tools import count_slow_writes
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.proto.toolhost.v1 import tool_host_service_pb2 as svc
from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.proto.toolhost.v1.tool_host_service_pb2_grpc import ToolHostServiceStub
from agentrt.server.core import idempotency_key
from agentrt.testing import FakeModelServer, FakeResponse, RecordedRequest, ToolHostProcess, spawn_tool_host
from tests.fault.conftest import API_KEY, first_turn_calls, runtime_env, start_runtime


class Model:
    """Chat Completions: the first turn calls ``call``, once ``released``; later turns finish."""

    def __init__(self, call: dict[str, Any]) -> None:
        self.call = call
        self.released = threading.Event()
        self.asked = 0

    def __call__(self, request: RecordedRequest) -> FakeResponse:
        body = request.json()
        if request.headers.get("authorization") != f"Bearer {API_KEY}":
            return FakeResponse.json_body({"error": {"message": "bad API key"}}, status=401)
        self.asked += 1
        if not any(m["role"] == "assistant" for m in body["messages"]):
            assert self.released.wait(30), "the test never released the first answer"
        return first_turn_calls(body, self.call)


@pytest.fixture
def fault_host(tmp_path: Path) -> Iterator[ToolHostProcess]:
    with spawn_tool_host(tmp_path / "toolhost", plugins=["agentrt.plugins.fault_tools"]) as host:
        yield host


def run_to_end(
    tmp_path: Path, host: ToolHostProcess, db_url: str, model: Model, before: Any = None, **agent: Any
) -> list[Any]:
    with FakeModelServer(default=model) as server:
        env = runtime_env(
            db_url=db_url, tool_host=host.address, model_url=f"{server.url}/v1", tools=(model.call["tool"],)
        )
        agents = json.loads(env["AGENTRT_AGENTS"])
        agents["refund"].update(agent)  # e.g. on_tool_unauthorized
        env["AGENTRT_AGENTS"] = json.dumps(agents)
        runtime = start_runtime(tmp_path, env)
        try:
            with Client(runtime.address) as client:
                run_id = client.start_run("refund", "write it").run_id
                if before is not None:
                    before(run_id)
                model.released.set()
                if agent.get("on_tool_unauthorized") == "pause":
                    fix_then_approve(client, host, run_id)
                return [e for e in client.stream_events(run_id, follow=True, timeout=30) if e.seq]
        finally:
            runtime.close()


def fix_then_approve(client: Client, host: ToolHostProcess, run_id: str) -> None:
    """The run paused for a person: fix the tool's credentials, then approve the same call."""
    for event in client.stream_events(run_id, follow=True, timeout=30):
        if event.HasField("approval_requested"):
            asked = event.approval_requested
            break
    else:
        raise AssertionError("the run never paused")
    assert asked.policy_version == "unauthorized-pause-1" and asked.tool == "guarded.write"
    assert count_slow_writes(host.data_dir) == 0
    (host.data_dir / "credentials_ok").touch()
    run = client.get_run(run_id)
    assert run.phase == run_pb2.RUN_PHASE_WAITING_APPROVAL
    client.resolve_approval(
        run_id, asked.approval_id, approve=True, args_hash=asked.args_hash, expected_revision=run.revision
    )


def run_id_of(events: list[Any]) -> str:
    return str(events[0].run_id)


def test_a_tools_unauthorized_fails_the_run_and_is_not_handed_to_the_model(
    tmp_path: Path, fault_host: ToolHostProcess, sqlite_url: str
) -> None:
    model = Model({"tool": "guarded.write", "arguments": {"seconds": 0, "note": "refund"}})
    events = run_to_end(tmp_path, fault_host, sqlite_url, model)

    types = [event_type(e) for e in events]
    ended = events[-1].run_ended
    assert ended.phase == run_pb2.RUN_PHASE_FAILED, types
    assert ended.reason == "tool_unauthorized:guarded.write" and not ended.retryable
    (failed,) = [e.tool_failed for e in events if e.HasField("tool_failed")]
    assert failed.error.code == tool_pb2.TOOL_ERROR_CODE_UNAUTHORIZED
    assert "retry.scheduled" not in types  # an authority refused is not a transient failure
    assert model.asked == 1  # the model was never asked what to do about it
    assert count_slow_writes(fault_host.data_dir) == 0


def test_where_the_agent_says_pause_unauthorized_waits_for_a_person_then_the_same_call_runs(
    tmp_path: Path, fault_host: ToolHostProcess, sqlite_url: str
) -> None:
    model = Model({"tool": "guarded.write", "arguments": {"seconds": 0, "note": "refund"}})
    events = run_to_end(tmp_path, fault_host, sqlite_url, model, on_tool_unauthorized="pause")

    types = [event_type(e) for e in events]
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED, types
    first, again = [e.tool_started for e in events if e.HasField("tool_started")]
    assert first.idempotency_key == again.idempotency_key and again.attempt == 2
    assert "tool.failed" not in types and "tool.completed" in types
    assert count_slow_writes(fault_host.data_dir) == 1  # refused once, then ran once
    assert model.asked == 2  # the model saw the result only


def test_a_key_reused_with_other_arguments_fails_the_run_without_running_the_write(
    tmp_path: Path, fault_host: ToolHostProcess, sqlite_url: str
) -> None:
    (fault_host.data_dir / "credentials_ok").touch()
    model = Model({"tool": "guarded.write", "arguments": {"seconds": 0, "note": "the run's"}})

    def someone_used_the_key_first(run_id: str) -> None:
        # The key the run's first call will carry (step 1 asks the model, its calls are step 2),
        # taken by a call with other arguments.
        key = idempotency_key(run_id, 2, 0)
        metadata = (
            ("x-agentrt-idempotency-key", key),
            ("x-agentrt-run-id", run_id),
            ("x-agentrt-call-id", "call_1"),
            ("x-agentrt-attempt", "1"),
            ("x-agentrt-fencing-token", "1"),
        )
        with grpc.insecure_channel(fault_host.address) as channel:
            reply = ToolHostServiceStub(channel).InvokeTool(
                svc.InvokeToolRequest(
                    tool="guarded.write", arguments_json='{"seconds": 0, "note": "another"}'
                ),
                metadata=metadata,
                timeout=10,
            )
        assert reply.WhichOneof("outcome") == "result_json"

    events = run_to_end(tmp_path, fault_host, sqlite_url, model, before=someone_used_the_key_first)

    types = [event_type(e) for e in events]
    ended = events[-1].run_ended
    assert ended.phase == run_pb2.RUN_PHASE_FAILED, types
    assert ended.reason == "idempotency_conflict" and not ended.retryable
    (started,) = [e.tool_started for e in events if e.HasField("tool_started")]
    assert started.idempotency_key == idempotency_key(run_id_of(events), 2, 0)
    (failed,) = [e.tool_failed for e in events if e.HasField("tool_failed")]
    assert failed.error.code == tool_pb2.TOOL_ERROR_CODE_KEY_CONFLICT
    assert model.asked == 1
    assert count_slow_writes(fault_host.data_dir) == 1  # only the other caller's write ran
