"""Integration tests of a REAL tool host process (``python -m agentrt.toolhost``) over gRPC.

Most tests share one host (module scope) serving the demo plugin and the example
plugin file; each test uses its own idempotency keys. Tests that stop, kill or
restart a host start their own.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from grpc_status import rpc_status

import agentrt.plugins as plugins
from agentrt.plugins.demo_tools import SLEEP_LOG_FILE, count_refunds
from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.proto.toolhost.v1.tool_host_service_pb2 import (
    GetOperationRequest,
    InvokeToolRequest,
    InvokeToolResponse,
    ListToolsRequest,
    PreviewToolRequest,
)
from agentrt.proto.toolhost.v1.tool_host_service_pb2_grpc import ToolHostServiceStub
from agentrt.testing import ToolHostProcess, spawn_tool_host, start_tool_host
from agentrt.toolhost import SERVICE_NAME, canonical_json
from agentrt.toolhost._ledger import Ledger

EXAMPLE_FILE = Path(plugins.__file__).parent / "example_plugin_file.py"
PLUGINS = ("agentrt.plugins.demo_tools", str(EXAMPLE_FILE))


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolHostProcess]:
    with spawn_tool_host(tmp_path_factory.mktemp("toolhost"), plugins=PLUGINS) as host:
        yield host


@pytest.fixture
async def channel(host: ToolHostProcess) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(host.address) as channel:
        yield channel


@pytest.fixture
def stub(channel: grpc.aio.Channel) -> ToolHostServiceStub:
    return ToolHostServiceStub(channel)


def _key() -> str:
    return f"key-{uuid.uuid4().hex}"


def _invoke(
    stub: ToolHostServiceStub,
    tool: str,
    args: dict[str, Any] | None = None,
    *,
    key: str | None,
    raw: str | None = None,
    timeout: float = 10.0,
    metadata: Sequence[tuple[str, str]] = (),
) -> Any:
    md = [("x-agentrt-idempotency-key", key)] if key is not None else []
    request = InvokeToolRequest(tool=tool, arguments_json=raw if raw is not None else json.dumps(args or {}))
    return stub.InvokeTool(request, metadata=[*md, *metadata], timeout=timeout)


def _error(response: InvokeToolResponse) -> tuple[str, str, dict[str, Any]]:
    assert response.HasField("error"), response
    error = response.error
    details = json.loads(error.details_json) if error.details_json else {}
    return tool_pb2.ToolErrorCode.Name(error.code), error.message, details


async def _rpc_error(call: Any) -> tuple[grpc.StatusCode, dict[str, Any]]:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    status: status_pb2.Status | None = await rpc_status.aio.from_call(call)
    assert status is not None, "no google.rpc.Status details"
    details: dict[str, Any] = {}
    for detail in status.details:
        for cls in (error_details_pb2.ErrorInfo, error_details_pb2.BadRequest):
            if detail.Is(cls.DESCRIPTOR):
                message = cls()
                detail.Unpack(message)
                details[cls.__name__] = message
    return info.value.code(), details


def _events(data_dir: Path) -> list[str]:
    path = data_dir / SLEEP_LOG_FILE
    return path.read_text().splitlines() if path.exists() else []


async def _wait_for(predicate: Any, *, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


REFUND = {"order_id": "A102", "amount": 1.5, "reason": "damaged box"}


# --- discovery -------------------------------------------------------------------------------


async def test_list_tools(stub: ToolHostServiceStub) -> None:
    specs = {s.name: s for s in (await stub.ListTools(ListToolsRequest(), timeout=5)).tools}
    assert list(specs) == [
        "noop.echo",
        "orders.cancel",
        "orders.lookup",
        "refund.issue",
        "sleep.wait",
        "text.upper",
    ]
    refund = specs["refund.issue"]
    assert refund.side_effect == tool_pb2.SIDE_EFFECT_WRITE
    assert (refund.idempotent, refund.supports_query) == (False, True)
    assert list(refund.intent_key.arguments) == ["order_id"]
    assert refund.intent_key.scope == tool_pb2.INTENT_SCOPE_SESSION
    assert not refund.intent_key.HasField("window")
    assert set(json.loads(refund.input_schema_json)["required"]) == {"order_id", "amount", "reason"}
    lookup = specs["orders.lookup"]
    assert lookup.side_effect == tool_pb2.SIDE_EFFECT_READ_ONLY
    assert (lookup.idempotent, lookup.concurrency_safe) == (True, True)
    assert specs["sleep.wait"].default_timeout.seconds == 600


async def test_health_is_serving(channel: grpc.aio.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", SERVICE_NAME):
        response = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert response.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_the_services(host: ToolHostProcess) -> None:
    with grpc.insecure_channel(host.address) as channel:
        services = set(ProtoReflectionDescriptorDatabase(channel).get_services())
    assert {SERVICE_NAME, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= services


# --- InvokeTool ------------------------------------------------------------------------------


async def test_invoke_success(stub: ToolHostServiceStub) -> None:
    response = await _invoke(stub, "orders.lookup", {"order_id": "A100"}, key=_key())
    assert json.loads(response.result_json)["customer"] == "Ada Lovelace"
    assert not response.replayed


async def test_a_plugin_loaded_from_a_file_serves(stub: ToolHostServiceStub) -> None:
    response = await _invoke(stub, "text.upper", {"text": "shout"}, key=_key())
    assert json.loads(response.result_json) == {"text": "SHOUT"}


async def test_an_unknown_order_is_permanent(stub: ToolHostServiceStub) -> None:
    code, message, details = _error(await _invoke(stub, "orders.lookup", {"order_id": "Z1"}, key=_key()))
    assert (code, details) == ("TOOL_ERROR_CODE_PERMANENT", {"order_id": "Z1"})
    assert "not found" in message


async def test_an_unknown_tool_is_a_typed_error_and_not_recorded(stub: ToolHostServiceStub) -> None:
    key = _key()
    code, _, details = _error(await _invoke(stub, "no.such.tool", key=key))
    assert (code, details) == ("TOOL_ERROR_CODE_UNKNOWN_TOOL", {"tool": "no.such.tool"})
    code_, _ = await _rpc_error(stub.GetOperation(GetOperationRequest(idempotency_key=key), timeout=5))
    assert code_ == grpc.StatusCode.NOT_FOUND


async def test_malformed_json_is_invalid_input_and_runs_nothing(
    stub: ToolHostServiceStub, host: ToolHostProcess
) -> None:
    before = count_refunds(host.data_dir)
    key = _key()
    code, _, details = _error(await _invoke(stub, "refund.issue", key=key, raw='{"order_id": "A100", '))
    assert code == "TOOL_ERROR_CODE_INVALID_INPUT"
    assert [e["type"] for e in details["errors"]] == ["json_invalid"]
    assert count_refunds(host.data_dir) == before
    code_, _ = await _rpc_error(stub.GetOperation(GetOperationRequest(idempotency_key=key), timeout=5))
    assert code_ == grpc.StatusCode.NOT_FOUND  # nothing recorded


async def test_schema_violations_are_invalid_input_and_run_nothing(
    stub: ToolHostServiceStub, host: ToolHostProcess
) -> None:
    before = count_refunds(host.data_dir)
    key = _key()
    response = await _invoke(stub, "refund.issue", {"order_id": "A100", "amount": -5}, key=key)
    code, message, details = _error(response)
    assert code == "TOOL_ERROR_CODE_INVALID_INPUT"
    assert {(e["type"], e["loc"][0]) for e in details["errors"]} == {
        ("greater_than", "amount"),
        ("missing", "reason"),
    }
    assert "2 error(s)" in message
    assert count_refunds(host.data_dir) == before
    code_, _ = await _rpc_error(stub.GetOperation(GetOperationRequest(idempotency_key=key), timeout=5))
    assert code_ == grpc.StatusCode.NOT_FOUND


async def test_a_missing_idempotency_key_is_invalid_argument_with_details(stub: ToolHostServiceStub) -> None:
    code, details = await _rpc_error(_invoke(stub, "orders.lookup", {"order_id": "A100"}, key=None))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    info = details["ErrorInfo"]
    assert (info.reason, info.domain) == ("MISSING_IDEMPOTENCY_KEY", "toolhost.agentrt")
    (violation,) = details["BadRequest"].field_violations
    assert violation.field == "x-agentrt-idempotency-key"


async def test_the_same_key_twice_refunds_once(stub: ToolHostServiceStub, host: ToolHostProcess) -> None:
    before = count_refunds(host.data_dir)
    key = _key()
    first = await _invoke(stub, "refund.issue", REFUND, key=key)
    second = await _invoke(stub, "refund.issue", REFUND, key=key)
    assert json.loads(first.result_json)["status"] == "issued"
    assert second.result_json == first.result_json
    assert (first.replayed, second.replayed) == (False, True)
    assert count_refunds(host.data_dir) == before + 1


async def test_the_same_key_with_other_arguments_conflicts(
    stub: ToolHostServiceStub, host: ToolHostProcess
) -> None:
    key = _key()
    await _invoke(stub, "refund.issue", REFUND, key=key)
    before = count_refunds(host.data_dir)
    code, _, details = _error(await _invoke(stub, "refund.issue", {**REFUND, "amount": 2.5}, key=key))
    assert code == "TOOL_ERROR_CODE_KEY_CONFLICT"
    assert details["recorded_tool"] == "refund.issue"
    code, _, _ = _error(await _invoke(stub, "orders.lookup", {"order_id": "A100"}, key=key))
    assert code == "TOOL_ERROR_CODE_KEY_CONFLICT"
    assert count_refunds(host.data_dir) == before


async def test_an_older_fencing_token_is_fenced_and_has_no_effect(
    stub: ToolHostServiceStub, host: ToolHostProcess
) -> None:
    run = [("x-agentrt-run-id", f"run-{uuid.uuid4().hex}")]
    current = await _invoke(
        stub, "refund.issue", REFUND, key=_key(), metadata=[*run, ("x-agentrt-fencing-token", "5")]
    )
    assert not current.HasField("error")
    before = count_refunds(host.data_dir)
    stale_key = _key()
    stale = await _invoke(
        stub, "refund.issue", REFUND, key=stale_key, metadata=[*run, ("x-agentrt-fencing-token", "4")]
    )
    code, _, details = _error(stale)
    assert code == "TOOL_ERROR_CODE_FENCED"
    assert (details["fencing_token"], details["highest_token"]) == (4, 5)
    assert count_refunds(host.data_dir) == before
    code_, _ = await _rpc_error(stub.GetOperation(GetOperationRequest(idempotency_key=stale_key), timeout=5))
    assert code_ == grpc.StatusCode.NOT_FOUND
    newer = await _invoke(
        stub,
        "orders.lookup",
        {"order_id": "A100"},
        key=_key(),
        metadata=[*run, ("x-agentrt-fencing-token", "6")],
    )
    assert not newer.HasField("error")


# --- GetOperation and PreviewTool ------------------------------------------------------------


async def test_get_operation_found(stub: ToolHostServiceStub) -> None:
    key = _key()
    response = await _invoke(stub, "refund.issue", REFUND, key=key, metadata=[("x-agentrt-run-id", "run-op")])
    operation = (await stub.GetOperation(GetOperationRequest(idempotency_key=key), timeout=5)).operation
    assert (operation.idempotency_key, operation.tool, operation.run_id) == (key, "refund.issue", "run-op")
    assert operation.status == tool_pb2.OPERATION_STATUS_SUCCEEDED
    assert operation.result_json == response.result_json
    assert operation.input_hash == hashlib.sha256(canonical_json(REFUND).encode()).hexdigest()
    assert 0 < operation.create_time.ToNanoseconds() <= operation.update_time.ToNanoseconds()
    assert not operation.HasField("error")


async def test_get_operation_not_found(stub: ToolHostServiceStub) -> None:
    code, details = await _rpc_error(
        stub.GetOperation(GetOperationRequest(idempotency_key="never-used"), timeout=5)
    )
    assert code == grpc.StatusCode.NOT_FOUND
    assert details["ErrorInfo"].reason == "OPERATION_NOT_FOUND"
    assert dict(details["ErrorInfo"].metadata) == {"idempotency_key": "never-used"}


async def test_preview(stub: ToolHostServiceStub, host: ToolHostProcess) -> None:
    before = count_refunds(host.data_dir)
    refund = await stub.PreviewTool(
        PreviewToolRequest(tool="refund.issue", arguments_json=json.dumps(REFUND)), timeout=5
    )
    assert "Alan Turing" in refund.impact_summary and "1.50 EUR" in refund.impact_summary
    assert count_refunds(host.data_dir) == before  # a preview has no effect
    echo = await stub.PreviewTool(PreviewToolRequest(tool="noop.echo", arguments_json='{"a": 1}'), timeout=5)
    assert echo.impact_summary == 'Would call noop.echo with {"a":1}'


async def test_preview_of_an_unknown_tool_is_not_found(stub: ToolHostServiceStub) -> None:
    code, details = await _rpc_error(stub.PreviewTool(PreviewToolRequest(tool="no.such"), timeout=5))
    assert code == grpc.StatusCode.NOT_FOUND
    assert details["ErrorInfo"].reason == "UNKNOWN_TOOL"


# --- deadlines and cancellation --------------------------------------------------------------


async def test_a_deadline_shorter_than_the_sleep_ends_the_call_and_the_tool(
    stub: ToolHostServiceStub, host: ToolHostProcess
) -> None:
    call_id = f"call-{uuid.uuid4().hex}"
    started = time.monotonic()
    call = _invoke(
        stub,
        "sleep.wait",
        {"seconds": 30},
        key=_key(),
        timeout=2.0,  # long enough for a loaded host to start the tool before it passes
        metadata=[("x-agentrt-call-id", call_id)],
    )
    try:
        response = await call
        code, message, _ = _error(response)
        assert code == "TOOL_ERROR_CODE_TRANSIENT" and message.startswith("timeout")
    except grpc.aio.AioRpcError as exc:  # only if the typed answer lost the race against the deadline
        assert exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert time.monotonic() - started < 15.0  # the deadline ended it, not the 30 s sleep
    await _wait_for(
        lambda: (
            f"timeout {call_id}" in _events(host.data_dir) or f"cancelled {call_id}" in _events(host.data_dir)
        )
    )
    assert f"started {call_id}" in _events(host.data_dir)
    assert f"finished {call_id}" not in _events(host.data_dir)


async def test_client_cancellation_reaches_the_plugin(
    stub: ToolHostServiceStub, host: ToolHostProcess
) -> None:
    key, call_id = _key(), f"call-{uuid.uuid4().hex}"
    call = _invoke(
        stub, "sleep.wait", {"seconds": 30}, key=key, timeout=30, metadata=[("x-agentrt-call-id", call_id)]
    )
    await _wait_for(lambda: f"started {call_id}" in _events(host.data_dir))
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await _wait_for(lambda: f"cancelled {call_id}" in _events(host.data_dir))

    async def recorded() -> tool_pb2.Operation:
        return (await stub.GetOperation(GetOperationRequest(idempotency_key=key), timeout=5)).operation

    deadline = time.monotonic() + 10
    while (operation := await recorded()).status == tool_pb2.OPERATION_STATUS_RUNNING:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    assert (operation.status, operation.error.code) == (
        tool_pb2.OPERATION_STATUS_FAILED,
        tool_pb2.TOOL_ERROR_CODE_CANCELLED,
    )


async def test_concurrent_duplicates_run_the_tool_once(
    stub: ToolHostServiceStub, host: ToolHostProcess
) -> None:
    key, call_id = _key(), f"call-{uuid.uuid4().hex}"
    metadata = [("x-agentrt-call-id", call_id)]
    responses = await asyncio.gather(
        *(_invoke(stub, "sleep.wait", {"seconds": 0.3}, key=key, metadata=metadata) for _ in range(3))
    )
    (result,) = {r.result_json for r in responses}  # one run, one result for all three
    assert json.loads(result)["slept"] == 0.3
    assert sorted(r.replayed for r in responses) == [False, True, True]
    assert _events(host.data_dir).count(f"started {call_id}") == 1


# --- process life: signals, crashes, bad input -----------------------------------------------


async def test_sigterm_exits_0_promptly(tmp_path: Path) -> None:
    # Entry points on: the demo plugin comes from the installed `agentrt.tools` group.
    host = start_tool_host(tmp_path, entrypoints=True)
    try:
        async with grpc.aio.insecure_channel(host.address) as channel:
            specs = (await ToolHostServiceStub(channel).ListTools(ListToolsRequest(), timeout=5)).tools
        assert "refund.issue" in {s.name for s in specs}
        started = time.monotonic()
        host.terminate()
        assert host.wait(timeout=10) == 0
        assert time.monotonic() - started < 3.0
        assert "stopped; counters" in host.stderr_text()
    finally:
        host.stop()


async def test_sigterm_cancels_a_running_call_and_exits_0(tmp_path: Path) -> None:
    with spawn_tool_host(
        tmp_path, plugins=["agentrt.plugins.demo_tools"], extra_args=["--grace", "0.2"]
    ) as host:
        async with grpc.aio.insecure_channel(host.address) as channel:
            stub = ToolHostServiceStub(channel)
            call = _invoke(
                stub,
                "sleep.wait",
                {"seconds": 30},
                key="k",
                timeout=30,
                metadata=[("x-agentrt-call-id", "c1")],
            )
            await _wait_for(lambda: "started c1" in _events(tmp_path))
            host.terminate()
            with pytest.raises(grpc.aio.AioRpcError):
                await call
            assert host.wait(timeout=10) == 0
        assert "cancelled c1" in _events(tmp_path)
    with Ledger(tmp_path / "ledger.sqlite", owner="reader") as ledger:
        record = ledger.get("k")
        assert record is not None and record.outcome is not None and record.outcome.failure is not None
        assert record.outcome.failure.code.value == "CANCELLED"


async def test_after_a_crash_a_read_only_call_runs_again(tmp_path: Path) -> None:
    args = {"seconds": 1.0}
    with spawn_tool_host(tmp_path, plugins=["agentrt.plugins.demo_tools"]) as host:
        async with grpc.aio.insecure_channel(host.address) as channel:
            call = _invoke(ToolHostServiceStub(channel), "sleep.wait", args, key="crash-ro", timeout=30)
            await _wait_for(lambda: "started crash-ro" in _events(tmp_path))
            host.kill()
            assert host.wait() == -signal.SIGKILL
            with pytest.raises(grpc.aio.AioRpcError):
                await call
    with spawn_tool_host(tmp_path, plugins=["agentrt.plugins.demo_tools"]) as host:
        async with grpc.aio.insecure_channel(host.address) as channel:
            stub = ToolHostServiceStub(channel)
            # A read-only idempotent call writes its entry only at its end (issue 19): the crash
            # left none, so the key is unknown, and the call is safe to run again.
            with pytest.raises(grpc.aio.AioRpcError) as unknown:
                await stub.GetOperation(GetOperationRequest(idempotency_key="crash-ro"), timeout=5)
            assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
            response = await _invoke(stub, "sleep.wait", args, key="crash-ro")
            operation = (
                await stub.GetOperation(GetOperationRequest(idempotency_key="crash-ro"), timeout=5)
            ).operation
    # sleep.wait is read-only, so the same key simply ran again, to the end this time.
    assert (json.loads(response.result_json)["slept"], response.replayed) == (1.0, False)
    assert operation.status == tool_pb2.OPERATION_STATUS_SUCCEEDED
    assert _events(tmp_path) == ["started crash-ro", "started crash-ro", "finished crash-ro"]


async def test_after_a_crash_a_write_call_is_outcome_unknown(tmp_path: Path) -> None:
    args = {"order_id": "A100", "amount": 3.0, "reason": "crash test"}
    # What a host that died while refund.issue ran leaves behind: a RUNNING entry of another life.
    with Ledger(tmp_path / "ledger.sqlite", owner="dead-host") as ledger:
        ledger.begin(
            idempotency_key="crash-w",
            tool="refund.issue",
            input_hash=hashlib.sha256(canonical_json(args).encode()).hexdigest(),
            run_id="run-1",
            call_id="c1",
            rerun_after_crash=False,
        )
    with spawn_tool_host(tmp_path, plugins=["agentrt.plugins.demo_tools"]) as host:
        async with grpc.aio.insecure_channel(host.address) as channel:
            response = await _invoke(ToolHostServiceStub(channel), "refund.issue", args, key="crash-w")
    code, message, details = _error(response)
    assert code == "TOOL_ERROR_CODE_TRANSIENT" and message.startswith("outcome unknown")
    assert details["status"] == "RUNNING"
    assert count_refunds(tmp_path) == 0


def test_bad_cli_input_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    clone = tmp_path / "clone.py"
    clone.write_text(EXAMPLE_FILE.read_text())
    data = tmp_path / "data"
    cmd = [sys.executable, "-m", "agentrt.toolhost", "--no-entrypoints", "--data-dir", str(data)]
    cmd += ["--plugin", str(EXAMPLE_FILE), "--plugin", str(clone)]
    env_root = str(Path(plugins.__file__).resolve().parent.parent)
    result = subprocess.run(
        cmd, capture_output=True, text=True, timeout=30, env={"PYTHONPATH": env_root, "PATH": "/usr/bin:/bin"}
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert "'text.upper'" in result.stderr and str(clone) in result.stderr
    assert not data.exists()
