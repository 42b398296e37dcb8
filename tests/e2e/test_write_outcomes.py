"""A write's outcome is never guessed: real runtime and tool host processes, a fake OpenAI model.

- A sync WRITE tool past its 1 s timeout (the host answers "has not stopped yet") ends the run
  with its real result and one effect: never tool.failed, never retried blindly.
- A write whose connection was never established (no connection within the connect layer) is retried
  under its key, not marked unknown: the request provably never left.
- ``supports_query`` is true only where the host can answer.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import grpc
import grpc.aio

from agentrt.client import Client, event_type
from agentrt.plugins.demo_tools import count_refunds
from agentrt.plugins.fault_tools import count_slow_writes
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.proto.toolhost.v1.tool_host_service_pb2 import GetOperationRequest, ListToolsRequest
from agentrt.proto.toolhost.v1.tool_host_service_pb2_grpc import ToolHostServiceStub
from agentrt.testing import start_tool_host
from tests.fault.conftest import REFUND_SCRIPT, free_port, runtime_env, serve_fake_openai, start_runtime

PLUGINS = ["agentrt.plugins.demo_tools", "agentrt.plugins.fault_tools"]


def persisted(address: str, run_id: str, timeout: float = 60.0) -> list[run_pb2.RunEvent]:
    with Client(address) as client:
        return [e for e in client.stream_events(run_id, follow=True, timeout=timeout) if e.seq]


def wait_for_type(address: str, run_id: str, wanted: str, timeout: float = 30.0) -> run_pb2.RunEvent:
    with Client(address) as client:
        for event in client.stream_events(run_id, follow=True, timeout=timeout):
            if event_type(event) == wanted:
                return event
    raise AssertionError(f"no {wanted}")


def wait_until_the_host_runs(host_address: str, idempotency_key: str, timeout: float = 30.0) -> None:
    """Until the host's ledger has the call RUNNING: tool.started is committed before it is sent."""
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(host_address) as channel:
        stub = ToolHostServiceStub(channel)
        while True:
            try:
                found = stub.GetOperation(GetOperationRequest(idempotency_key=idempotency_key), timeout=5)
                if found.operation.status == tool_pb2.OPERATION_STATUS_RUNNING:
                    return
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.NOT_FOUND:  # not there yet
                    raise
            assert time.monotonic() < deadline, "the host never ran the call"
            time.sleep(0.02)


def test_a_sync_write_past_its_timeout_ends_with_its_real_result_and_one_effect(tmp_path: Path) -> None:
    write = {"tool": "slow.write_sync", "arguments": {"seconds": 2.5, "note": "refund A100"}}
    host = start_tool_host(tmp_path / "host", plugins=PLUGINS)
    with serve_fake_openai({1: write, 2: {"text": "Refunded."}}) as (fake, model_url):
        env = runtime_env(
            db_url=f"sqlite:///{tmp_path / 'rt.sqlite'}",
            tool_host=host.address,
            model_url=model_url,
            tools=("slow.write_sync",),
        )
        runtime = start_runtime(tmp_path, env)
        try:
            with Client(runtime.address) as client:
                run_id = client.start_run("refund", "Please refund A100").run_id
            events = persisted(runtime.address, run_id)
        finally:
            runtime.close()
            host.stop()
    types = [event_type(e) for e in events]
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED, types
    # The host said "still running": the write waited in UNKNOWN_OUTCOME, then the ledger answered.
    (unknown,) = [e.tool_outcome_unknown for e in events if e.HasField("tool_outcome_unknown")]
    assert "has not stopped yet" in unknown.reason
    assert "tool.failed" not in types and "retry.scheduled" not in types
    (completed,) = [e.tool_completed for e in events if e.HasField("tool_completed")]
    assert json.loads(completed.result_json)["written"] == "refund A100"
    assert count_slow_writes(tmp_path / "host") == 1  # ONE effect
    # The model was told the real result, not a failure.
    told = [m for m in fake.bodies[-1]["messages"] if m["role"] == "tool"]
    assert told and json.loads(told[-1]["content"])["written"] == "refund A100"


def test_a_write_whose_connection_was_never_established_is_retried_under_its_key(tmp_path: Path) -> None:
    port = free_port()
    host = start_tool_host(tmp_path / "host", plugins=PLUGINS, listen=f"127.0.0.1:{port}")
    with serve_fake_openai({1: REFUND_SCRIPT[2], 2: {"text": "Refunded."}}) as (_, model_url):
        env = runtime_env(
            db_url=f"sqlite:///{tmp_path / 'rt.sqlite'}",
            tool_host=host.address,
            model_url=model_url,
            tool_attempts=30,
            retry_base_s=0.2,
            retry_cap_s=0.4,
        )
        runtime = start_runtime(tmp_path, env)
        try:
            host.stop()  # the runtime learned the tools; now nothing listens on the port
            with Client(runtime.address) as client:
                run_id = client.start_run("refund", "Please refund A100").run_id
            wait_for_type(runtime.address, run_id, "retry.scheduled")
            host = start_tool_host(tmp_path / "host", plugins=PLUGINS, listen=f"127.0.0.1:{port}")
            events = persisted(runtime.address, run_id)
        finally:
            runtime.close()
            host.stop()
    types = [event_type(e) for e in events]
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED, types
    # Provably unsent: retried, never put in UNKNOWN_OUTCOME waiting for a ledger that never saw it.
    assert "tool.outcome.unknown" not in types and "tool.failed" not in types
    retries = [e.retry_scheduled for e in events if e.HasField("retry_scheduled")]
    assert retries and all("not sent" in r.reason for r in retries)  # what people are told
    started = [e.tool_started for e in events if e.HasField("tool_started")]
    assert len(started) == len(retries) + 1 and len({s.idempotency_key for s in started}) == 1
    assert count_refunds(tmp_path / "host" / "refunds.sqlite") == 1


def test_supports_query_is_true_only_where_the_host_can_answer(tmp_path: Path) -> None:
    host = start_tool_host(tmp_path / "host", plugins=PLUGINS)

    async def listed() -> dict[str, bool]:
        async with grpc.aio.insecure_channel(host.address) as channel:
            tools = (await ToolHostServiceStub(channel).ListTools(ListToolsRequest(), timeout=10)).tools
        return {spec.name: spec.supports_query for spec in tools}

    try:
        supports = asyncio.run(listed())
    finally:
        host.stop()
    assert supports["refund.issue"] is True  # demo_tools implements the query hook
    assert supports["orders.lookup"] is True and supports["flaky.transient"] is True  # safe to re-run
    # No plugin can say whether these took effect after a host crash: no promise.
    assert supports["slow.write"] is False and supports["slow.write_sync"] is False


def test_a_write_whose_caller_is_killed_runs_to_its_end_past_the_cancel_grace(tmp_path: Path) -> None:
    """A crash is never a cancellation: the runtime is killed while an async write runs, and the
    host lets the write (longer than its 2 s cancel grace) finish and record its effect."""
    write = {"tool": "slow.write", "arguments": {"seconds": 3.0, "note": "n"}}
    host = start_tool_host(tmp_path / "host", plugins=PLUGINS)
    with serve_fake_openai({1: write, 2: {"text": "ok"}}) as (_, model_url):
        env = runtime_env(
            db_url=f"sqlite:///{tmp_path / 'rt.sqlite'}",
            tool_host=host.address,
            model_url=model_url,
            tools=("slow.write",),
        )
        runtime = start_runtime(tmp_path, env)
        try:
            with Client(runtime.address) as client:
                run_id = client.start_run("refund", "go").run_id
            started = wait_for_type(runtime.address, run_id, "tool.started")
            wait_until_the_host_runs(host.address, started.tool_started.idempotency_key)
            runtime.kill()
            deadline = time.monotonic() + 10
            while count_slow_writes(tmp_path / "host") == 0:
                assert time.monotonic() < deadline, "the write was stopped when its caller died"
                time.sleep(0.05)
        finally:
            runtime.close()
            host.stop()
    assert count_slow_writes(tmp_path / "host") == 1
