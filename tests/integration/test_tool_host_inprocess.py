"""Integration tests of the tool host over real gRPC (loopback, port 0), in-process with test tools.

These cover paths that need tools the demo plugin does not have: tools that fail in
every way, ignore cancellation, or block a thread past their deadline.
"""

from __future__ import annotations

import asyncio
import collections
import json
import threading
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pydantic
import pytest
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status
from opentelemetry import trace

from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.proto.toolhost.v1.tool_host_service_pb2 import (
    CancelOperationRequest,
    GetOperationRequest,
    InvokeToolRequest,
    InvokeToolResponse,
    ListToolsRequest,
    PreviewToolRequest,
)
from agentrt.proto.toolhost.v1.tool_host_service_pb2_grpc import ToolHostServiceStub
from agentrt.toolhost import (
    PermanentError,
    SideEffect,
    Tool,
    ToolCancelled,
    ToolContext,
    ToolHost,
    TransientError,
    Unauthorized,
    get_plugin_manager,
    hookimpl,
    tool,
)
from agentrt.toolhost._ledger import Ledger, OperationStatus

# --- test tools ------------------------------------------------------------------------------


class State:
    """Per-test state the tools report into (they run in the test's own event loop)."""

    def __init__(self) -> None:
        self.executions: collections.Counter[str] = collections.Counter()
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.thread_release = threading.Event()
        self.contexts: list[ToolContext] = []
        self.spans: list[trace.SpanContext] = []
        self.hard_cancelled = False
        self.saw_signal = False


STATE = State()


class Args(pydantic.BaseModel):
    value: int = 0


class StrictArgs(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    amount: float = pydantic.Field(gt=0)


@tool(name="probe.context", description="Returns what it sees.", side_effect=SideEffect.READ_ONLY)
async def probe_context(args: Args, ctx: ToolContext) -> dict[str, Any]:
    STATE.contexts.append(ctx)
    STATE.spans.append(trace.get_current_span().get_span_context())
    return {"remaining": ctx.remaining()}


@tool(
    name="probe.short",
    description="A tool with a 1 s timeout.",
    side_effect=SideEffect.READ_ONLY,
    timeout=1.0,
)
async def probe_short(args: Args, ctx: ToolContext) -> dict[str, Any]:
    return {"remaining": ctx.remaining()}


@tool(name="fail.unexpected", description="Raises a bare exception.", side_effect=SideEffect.READ_ONLY)
async def fail_unexpected(args: Args, ctx: ToolContext) -> None:
    raise ValueError("secret internals")


@tool(name="fail.result", description="Returns something unserialisable.", side_effect=SideEffect.READ_ONLY)
def fail_result(args: Args, ctx: ToolContext) -> Any:
    return {"thing": object()}


@tool(name="fail.details", description="Raises a typed error with details.", side_effect=SideEffect.READ_ONLY)
def fail_details(args: Args, ctx: ToolContext) -> None:
    raise PermanentError("no such thing", details={"thing": args.value})


@tool(name="fail.unauthorized", description="Always unauthorized.", side_effect=SideEffect.WRITE)
def fail_unauthorized(args: Args, ctx: ToolContext) -> None:
    STATE.executions[ctx.idempotency_key] += 1
    raise Unauthorized("not yours")


@tool(name="fail.permanent", description="Always a permanent failure.", side_effect=SideEffect.WRITE)
def fail_permanent(args: Args, ctx: ToolContext) -> None:
    STATE.executions[ctx.idempotency_key] += 1
    raise PermanentError("never")


@tool(name="flaky.write", description="Fails transiently the first time.", side_effect=SideEffect.WRITE)
def flaky_write(args: Args, ctx: ToolContext) -> dict[str, int]:
    STATE.executions[ctx.idempotency_key] += 1
    if STATE.executions[ctx.idempotency_key] == 1:
        raise TransientError("dependency down")
    return {"executions": STATE.executions[ctx.idempotency_key], "attempt": ctx.attempt}


@tool(name="gate.write", description="Runs until released.", side_effect=SideEffect.WRITE)
async def gate_write(args: Args, ctx: ToolContext) -> dict[str, int]:
    STATE.executions[ctx.idempotency_key] += 1
    STATE.started.set()
    await STATE.release.wait()
    return {"value": args.value}


@tool(name="polite.wait", description="Stops when signalled.", side_effect=SideEffect.WRITE)
async def polite_wait(args: Args, ctx: ToolContext) -> str:
    STATE.executions[ctx.idempotency_key] += 1
    if STATE.executions[ctx.idempotency_key] > 1:
        return "second time lucky"
    STATE.started.set()
    await ctx.wait_cancelled()
    STATE.saw_signal = True
    raise ToolCancelled("stopped on request")


@tool(name="polite.read", description="Reads until signalled.", side_effect=SideEffect.READ_ONLY)
async def polite_read(args: Args, ctx: ToolContext) -> str:
    STATE.started.set()
    await ctx.wait_cancelled()
    STATE.saw_signal = True
    raise ToolCancelled("stopped")


@tool(name="stubborn.wait", description="Ignores the signal.", side_effect=SideEffect.WRITE)
async def stubborn_wait(args: Args, ctx: ToolContext) -> str:
    STATE.started.set()
    try:
        await STATE.release.wait()
    except asyncio.CancelledError:
        STATE.hard_cancelled = True
        raise
    return "done"


@tool(
    name="blocking.sync", description="Blocks its thread, ignoring deadlines.", side_effect=SideEffect.WRITE
)
def blocking_sync(args: Args, ctx: ToolContext) -> dict[str, bool]:
    STATE.executions[ctx.idempotency_key] += 1
    released = STATE.thread_release.wait(timeout=30)
    return {"released": released, "saw_signal": ctx.is_cancelled()}


TOOLS: list[Tool] = [
    probe_context,
    probe_short,
    fail_unexpected,
    fail_result,
    fail_details,
    fail_unauthorized,
    fail_permanent,
    flaky_write,
    gate_write,
    polite_wait,
    polite_read,
    stubborn_wait,
    blocking_sync,
]


class PreviewPlugin:
    @hookimpl
    def agentrt_preview_tool(self, tool: str, arguments: dict[str, Any]) -> str | None:
        if tool == "fail.details":
            raise RuntimeError("preview internals")
        return None


# --- fixtures and helpers --------------------------------------------------------------------


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[ToolHost]:
    global STATE
    STATE = State()
    pm = get_plugin_manager(entrypoints=False)
    pm.register(PreviewPlugin(), name="preview-plugin")
    tools = {t.name: t for t in [*TOOLS, _strict_tool()]}
    host = ToolHost(tools=tools, data_dir=tmp_path / "data", pm=pm, cancel_grace=0.3)
    await host.start("127.0.0.1:0")
    try:
        yield host
    finally:
        STATE.release.set()
        STATE.thread_release.set()
        await host.stop(grace=1.0)


def _strict_tool() -> Tool:
    def strict(args: StrictArgs, ctx: ToolContext) -> str:
        return "ok"

    return tool(name="strict.args", description="x", side_effect=SideEffect.READ_ONLY, args_model=StrictArgs)(
        strict
    )


@pytest.fixture
async def stub(host: ToolHost) -> AsyncIterator[ToolHostServiceStub]:
    assert host.address
    async with grpc.aio.insecure_channel(host.address) as channel:
        yield ToolHostServiceStub(channel)


def _invoke(
    stub: ToolHostServiceStub,
    tool_name: str,
    args: dict[str, Any] | None = None,
    *,
    key: str | None,
    timeout: float | None = 10.0,
    metadata: Sequence[tuple[str, str]] = (),
) -> Any:
    md = [("x-agentrt-idempotency-key", key)] if key is not None else []
    request = InvokeToolRequest(tool=tool_name, arguments_json=json.dumps(args or {}))
    return stub.InvokeTool(request, metadata=[*md, *metadata], timeout=timeout)


async def _rpc_error(call: Any) -> tuple[grpc.StatusCode, dict[str, Any]]:
    """Await a call that must fail; return its code and its decoded google.rpc details."""
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


def _error(response: InvokeToolResponse) -> tuple[str, str, dict[str, Any]]:
    assert response.HasField("error"), response
    error = response.error
    return (
        tool_pb2.ToolErrorCode.Name(error.code),
        error.message,
        json.loads(error.details_json) if error.details_json else {},
    )


async def _operation(stub: ToolHostServiceStub, key: str) -> tool_pb2.Operation:
    response = await stub.GetOperation(GetOperationRequest(idempotency_key=key), timeout=5)
    return response.operation


async def _wait_for(predicate: Any, *, within: float = 5.0) -> None:
    """Poll an async or sync predicate until true, failing after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


# --- tests -----------------------------------------------------------------------------------


async def test_list_tools_is_sorted_by_name(stub: ToolHostServiceStub) -> None:
    names = [spec.name for spec in (await stub.ListTools(ListToolsRequest(), timeout=5)).tools]
    assert names == sorted(t.name for t in [*TOOLS, _strict_tool()])


async def test_the_context_carries_metadata_and_the_capped_deadline(
    stub: ToolHostServiceStub, host: ToolHost
) -> None:
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    metadata = [
        ("x-agentrt-run-id", "run-9"),
        ("x-agentrt-call-id", "call-3"),
        ("x-agentrt-attempt", "2"),
        ("x-agentrt-fencing-token", "4"),
        ("traceparent", traceparent),
    ]
    response = await _invoke(stub, "probe.context", key="ctx-1", timeout=5.0, metadata=metadata)
    (ctx,) = STATE.contexts
    assert (ctx.idempotency_key, ctx.run_id, ctx.call_id, ctx.attempt, ctx.fencing_token) == (
        "ctx-1",
        "run-9",
        "call-3",
        2,
        4,
    )
    assert ctx.traceparent == traceparent
    assert ctx.data_dir == host.data_dir
    assert 4.0 < json.loads(response.result_json)["remaining"] <= 5.0  # the gRPC deadline propagated

    no_deadline = await _invoke(stub, "probe.context", key="ctx-2", timeout=None)
    assert 29.0 < json.loads(no_deadline.result_json)["remaining"] <= 30.0  # the tool's own timeout
    capped = await _invoke(stub, "probe.short", key="ctx-3", timeout=5.0)
    assert 0.5 < json.loads(capped.result_json)["remaining"] <= 1.0  # the tool's timeout caps the deadline


async def test_a_tool_runs_in_the_callers_trace_only_when_there_is_one(stub: ToolHostServiceStub) -> None:
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    await _invoke(stub, "probe.context", key="trace-1", metadata=[("traceparent", traceparent)])
    await _invoke(stub, "probe.context", key="trace-2")
    traced, untraced = STATE.spans
    assert (traced.trace_id, traced.span_id) == (0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331)
    assert not untraced.is_valid


async def test_fencing_is_checked_first_whatever_else_is_wrong(stub: ToolHostServiceStub) -> None:
    run = ("x-agentrt-run-id", "run-fence")
    # Refused calls still remember a newer token ...
    unknown = await _invoke(stub, "no.such.tool", key="f-1", metadata=[run, ("x-agentrt-fencing-token", "7")])
    assert _error(unknown)[0] == "TOOL_ERROR_CODE_UNKNOWN_TOOL"
    # ... and a stale caller hears FENCED, not what else is wrong with its call.
    for tool_name, args in [("no.such.tool", {}), ("strict.args", {"amount": -1}), ("probe.context", {})]:
        stale = await _invoke(
            stub, tool_name, args, key="f-2", metadata=[run, ("x-agentrt-fencing-token", "6")]
        )
        code, _, details = _error(stale)
        assert code == "TOOL_ERROR_CODE_FENCED", tool_name
        assert (details["fencing_token"], details["highest_token"]) == (6, 7)
    assert not STATE.contexts  # the stale call never ran
    code_, _ = await _rpc_error(stub.GetOperation(GetOperationRequest(idempotency_key="f-2"), timeout=5))
    assert code_ == grpc.StatusCode.NOT_FOUND
    current = await _invoke(
        stub, "probe.context", key="f-3", metadata=[run, ("x-agentrt-fencing-token", "7")]
    )
    assert not current.HasField("error")


async def test_an_unexpected_exception_is_permanent_without_a_traceback(stub: ToolHostServiceStub) -> None:
    code, message, _ = _error(await _invoke(stub, "fail.unexpected", key="u-1"))
    assert (code, message) == ("TOOL_ERROR_CODE_PERMANENT", "ValueError: secret internals")
    operation = await _operation(stub, "u-1")
    assert operation.status == tool_pb2.OPERATION_STATUS_FAILED
    assert "Traceback" not in operation.error.message


async def test_an_unserialisable_result_is_permanent(stub: ToolHostServiceStub) -> None:
    code, message, _ = _error(await _invoke(stub, "fail.result", key="r-1"))
    assert code == "TOOL_ERROR_CODE_PERMANENT"
    assert "not JSON serialisable" in message


async def test_typed_error_details_travel_as_json(stub: ToolHostServiceStub) -> None:
    assert _error(await _invoke(stub, "fail.details", {"value": 7}, key="d-1")) == (
        "TOOL_ERROR_CODE_PERMANENT",
        "no such thing",
        {"thing": 7},
    )


async def test_a_final_failure_is_replayed_not_rerun(stub: ToolHostServiceStub) -> None:
    first = await _invoke(stub, "fail.permanent", key="perm-1")
    second = await _invoke(stub, "fail.permanent", key="perm-1")
    assert _error(first)[0] == _error(second)[0] == "TOOL_ERROR_CODE_PERMANENT"
    assert (first.replayed, second.replayed) == (False, True)
    assert STATE.executions["perm-1"] == 1


async def test_an_unauthorized_call_runs_again_under_its_key(stub: ToolHostServiceStub) -> None:
    # It did nothing; a run paused for a person sends it again once its authority is fixed.
    first = await _invoke(stub, "fail.unauthorized", key="auth-1")
    second = await _invoke(stub, "fail.unauthorized", key="auth-1")
    assert _error(first)[0] == _error(second)[0] == "TOOL_ERROR_CODE_UNAUTHORIZED"
    assert (first.replayed, second.replayed) == (False, False)
    assert STATE.executions["auth-1"] == 2


async def test_a_transient_failure_runs_again_under_the_same_key(
    stub: ToolHostServiceStub, host: ToolHost
) -> None:
    first = await _invoke(stub, "flaky.write", {"value": 1}, key="flaky-1")
    assert _error(first)[:2] == ("TOOL_ERROR_CODE_TRANSIENT", "dependency down")
    operation = await _operation(stub, "flaky-1")
    assert operation.status == tool_pb2.OPERATION_STATUS_FAILED
    assert operation.error.code == tool_pb2.TOOL_ERROR_CODE_TRANSIENT

    second = await _invoke(
        stub, "flaky.write", {"value": 1}, key="flaky-1", metadata=[("x-agentrt-attempt", "2")]
    )
    assert not second.replayed
    assert json.loads(second.result_json) == {"executions": 2, "attempt": 2}
    third = await _invoke(stub, "flaky.write", {"value": 1}, key="flaky-1")
    assert third.replayed and third.result_json == second.result_json
    assert host.counters["duplicate_suppressed"] == 1


async def test_a_concurrent_duplicate_waits_for_the_first_call(
    stub: ToolHostServiceStub, host: ToolHost
) -> None:
    first = asyncio.ensure_future(_invoke(stub, "gate.write", {"value": 5}, key="dup-1"))
    await asyncio.wait_for(STATE.started.wait(), 5)
    second = asyncio.ensure_future(_invoke(stub, "gate.write", {"value": 5}, key="dup-1"))
    await _wait_for(lambda: host.counters["in_flight_waits"] == 1)
    STATE.release.set()
    one, two = await asyncio.gather(first, second)
    assert one.result_json == two.result_json == '{"value":5}'
    assert (one.replayed, two.replayed) == (False, True)
    assert STATE.executions["dup-1"] == 1


async def test_a_duplicate_gives_up_when_the_first_call_outlasts_its_deadline(
    stub: ToolHostServiceStub,
) -> None:
    first = asyncio.ensure_future(_invoke(stub, "gate.write", key="dup-2"))
    await asyncio.wait_for(STATE.started.wait(), 5)
    code, message, details = _error(await _invoke(stub, "gate.write", key="dup-2", timeout=1.0))
    assert code == "TOOL_ERROR_CODE_TRANSIENT"
    assert "still running" in message and details == {"still_running": True, "deadline_exceeded": True}
    STATE.release.set()
    assert not (await first).HasField("error")


async def test_an_explicit_cancel_signals_the_tool_and_records_cancelled(stub: ToolHostServiceStub) -> None:
    call = asyncio.ensure_future(_invoke(stub, "polite.wait", key="cancel-1"))
    await asyncio.wait_for(STATE.started.wait(), 5)
    asked = await stub.CancelOperation(
        CancelOperationRequest(idempotency_key="cancel-1", reason="x"), timeout=5
    )
    assert asked.signalled
    code, _, details = _error(await call)  # the call answers with what really happened
    assert code == "TOOL_ERROR_CODE_CANCELLED" and "effect" not in details  # the tool's own word

    async def recorded() -> bool:
        return (await _operation(stub, "cancel-1")).status == tool_pb2.OPERATION_STATUS_FAILED

    await _wait_for(recorded)
    operation = await _operation(stub, "cancel-1")
    assert operation.error.code == tool_pb2.TOOL_ERROR_CODE_CANCELLED
    assert STATE.saw_signal
    # Cancelled is retryable: the same key runs again.
    again = await _invoke(stub, "polite.wait", key="cancel-1")
    assert (again.result_json, again.replayed) == ('"second time lucky"', False)


async def test_a_tool_ignoring_an_explicit_cancel_is_cancelled_after_the_grace(
    stub: ToolHostServiceStub,
) -> None:
    call = _invoke(stub, "stubborn.wait", key="stubborn-1")
    await asyncio.wait_for(STATE.started.wait(), 5)
    await stub.CancelOperation(CancelOperationRequest(idempotency_key="stubborn-1"), timeout=5)
    code, message, details = _error(await call)
    assert STATE.hard_cancelled
    assert (code, message) == ("TOOL_ERROR_CODE_CANCELLED", "cancelled on request")
    # Stopped where it stood: the host cannot say whether the effect happened.
    assert details == {"effect": "unknown", "stopped": "cancel_requested"}
    operation = await _operation(stub, "stubborn-1")
    assert operation.error.code == tool_pb2.TOOL_ERROR_CODE_CANCELLED


async def test_a_write_whose_caller_vanishes_runs_to_its_end_and_records_its_outcome(
    stub: ToolHostServiceStub, host: ToolHost
) -> None:
    call = _invoke(stub, "gate.write", {"value": 7}, key="vanish-1")
    await asyncio.wait_for(STATE.started.wait(), 5)
    call.cancel()  # what a killed runtime looks like from here
    with pytest.raises(asyncio.CancelledError):
        await call
    await _wait_for(lambda: host.counters["caller_vanished_write_kept"] == 1)
    assert (await _operation(stub, "vanish-1")).status == tool_pb2.OPERATION_STATUS_RUNNING
    STATE.release.set()

    async def recorded() -> bool:
        return (await _operation(stub, "vanish-1")).status == tool_pb2.OPERATION_STATUS_SUCCEEDED

    await _wait_for(recorded)
    assert (await _operation(stub, "vanish-1")).result_json == '{"value":7}'
    assert STATE.executions["vanish-1"] == 1


async def test_a_read_whose_caller_vanishes_is_stopped(stub: ToolHostServiceStub) -> None:
    call = _invoke(stub, "polite.read", key="vanish-read")
    await asyncio.wait_for(STATE.started.wait(), 5)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call

    async def recorded() -> bool:
        return (await _operation(stub, "vanish-read")).status == tool_pb2.OPERATION_STATUS_FAILED

    await _wait_for(recorded)
    assert STATE.saw_signal
    assert (await _operation(stub, "vanish-read")).error.code == tool_pb2.TOOL_ERROR_CODE_CANCELLED


async def test_cancel_operation_of_an_ended_or_unknown_call(stub: ToolHostServiceStub) -> None:
    await _invoke(stub, "flaky.write", key="ended-1")
    asked = await stub.CancelOperation(CancelOperationRequest(idempotency_key="ended-1"), timeout=5)
    assert not asked.signalled and asked.operation.status == tool_pb2.OPERATION_STATUS_FAILED
    code, details = await _rpc_error(
        stub.CancelOperation(CancelOperationRequest(idempotency_key="no-such-key"), timeout=5)
    )
    assert code == grpc.StatusCode.NOT_FOUND
    assert details["ErrorInfo"].reason == "OPERATION_NOT_FOUND"
    code, details = await _rpc_error(stub.CancelOperation(CancelOperationRequest(), timeout=5))
    assert code == grpc.StatusCode.INVALID_ARGUMENT


async def test_an_async_tool_overrunning_its_deadline_is_cancelled(stub: ToolHostServiceStub) -> None:
    started = time.monotonic()
    response = await _invoke(stub, "stubborn.wait", key="overrun-1", timeout=1.0)
    assert time.monotonic() - started < 1.0
    code, message, details = _error(response)
    assert code == "TOOL_ERROR_CODE_TRANSIENT" and message.startswith("timeout")
    # Stopped at an await: the host cannot tell what it did; it says the deadline stopped it.
    assert details == {"effect": "unknown", "deadline_exceeded": True}
    assert STATE.hard_cancelled
    operation = await _operation(stub, "overrun-1")
    assert (operation.status, operation.error.code) == (
        tool_pb2.OPERATION_STATUS_FAILED,
        tool_pb2.TOOL_ERROR_CODE_TRANSIENT,
    )


async def test_a_sync_tool_overrunning_its_deadline_keeps_running_and_records_later(
    stub: ToolHostServiceStub,
) -> None:
    response = await _invoke(stub, "blocking.sync", key="sync-1", timeout=1.0)
    code, message, details = _error(response)
    assert code == "TOOL_ERROR_CODE_TRANSIENT" and message.startswith("timeout")
    assert details == {"still_running": True, "deadline_exceeded": True}
    # Its thread cannot be interrupted: the entry stays RUNNING until it really ends.
    assert (await _operation(stub, "sync-1")).status == tool_pb2.OPERATION_STATUS_RUNNING
    STATE.thread_release.set()

    async def recorded() -> bool:
        return (await _operation(stub, "sync-1")).status == tool_pb2.OPERATION_STATUS_SUCCEEDED

    await _wait_for(recorded)
    replay = await _invoke(stub, "blocking.sync", key="sync-1")
    assert replay.replayed
    assert json.loads(replay.result_json) == {"released": True, "saw_signal": True}
    assert STATE.executions["sync-1"] == 1


async def test_shutdown_cancels_running_calls_and_records_them(tmp_path: Path) -> None:
    global STATE
    STATE = State()
    host = ToolHost(tools={polite_wait.name: polite_wait}, data_dir=tmp_path, cancel_grace=0.5)
    await host.start()
    assert host.address
    async with grpc.aio.insecure_channel(host.address) as channel:
        call = _invoke(ToolHostServiceStub(channel), "polite.wait", key="shutdown-1")
        await asyncio.wait_for(STATE.started.wait(), 5)
        await host.stop(grace=0.1)
        with pytest.raises(grpc.aio.AioRpcError):
            await call
    assert STATE.saw_signal
    with Ledger(tmp_path / "ledger.sqlite", owner="reader") as ledger:
        record = ledger.get("shutdown-1")
        assert record is not None and record.status is OperationStatus.FAILED
        assert record.outcome is not None and record.outcome.failure is not None
        assert record.outcome.failure.code.value == "CANCELLED"


async def test_invalid_metadata_is_invalid_argument(stub: ToolHostServiceStub) -> None:
    code, details = await _rpc_error(
        _invoke(stub, "probe.context", key="m-1", metadata=[("x-agentrt-fencing-token", "soon")])
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details["ErrorInfo"].reason == "INVALID_METADATA"
    assert details["ErrorInfo"].domain == "toolhost.agentrt"
    assert details["BadRequest"].field_violations[0].field == "x-agentrt-fencing-token"


async def test_get_operation_without_a_key_is_invalid_argument(stub: ToolHostServiceStub) -> None:
    code, details = await _rpc_error(stub.GetOperation(GetOperationRequest(), timeout=5))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details["ErrorInfo"].reason == "MISSING_FIELD"
    assert details["BadRequest"].field_violations[0].field == "idempotency_key"


async def test_preview_hook_failure_is_internal_without_internals(stub: ToolHostServiceStub) -> None:
    call = stub.PreviewTool(PreviewToolRequest(tool="fail.details", arguments_json="{}"), timeout=5)
    code, details = await _rpc_error(call)
    assert code == grpc.StatusCode.INTERNAL
    assert details["ErrorInfo"].reason == "PREVIEW_FAILED"
    assert "internals" not in (await call.details())


async def test_preview_with_invalid_arguments_is_a_bad_request(stub: ToolHostServiceStub) -> None:
    request = PreviewToolRequest(tool="strict.args", arguments_json='{"amount": -1, "x": 1}')
    code, details = await _rpc_error(stub.PreviewTool(request, timeout=5))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details["ErrorInfo"].reason == "INVALID_ARGUMENTS"
    fields = {v.field for v in details["BadRequest"].field_violations}
    assert fields == {"arguments_json.amount", "arguments_json.x"}


async def test_preview_defaults_when_no_plugin_answers(stub: ToolHostServiceStub) -> None:
    request = PreviewToolRequest(tool="strict.args", arguments_json='{"amount": 2}')
    response = await stub.PreviewTool(request, timeout=5)
    assert response.impact_summary == 'Would call strict.args with {"amount":2}'


async def test_a_broken_ledger_is_internal_without_internals(
    stub: ToolHostServiceStub, host: ToolHost
) -> None:
    host._ledger.close()  # type: ignore[union-attr]  # white box: make every ledger access fail
    for call in (
        _invoke(stub, "probe.context", key="broken-1"),
        stub.GetOperation(GetOperationRequest(idempotency_key="broken-1"), timeout=5),
    ):
        code, details = await _rpc_error(call)
        assert code == grpc.StatusCode.INTERNAL
        assert details["ErrorInfo"].reason == "INTERNAL"
        assert await call.details() == "internal error"
