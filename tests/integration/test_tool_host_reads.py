"""A read-only idempotent call over real gRPC: no RUNNING ledger entry, its outcome written once.

In-process hosts with test tools, plus one host process killed mid-read (the demo plugin's
sleep.wait). The ledger is read through a second SQLite connection on the host's own file.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import signal
import sqlite3
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pydantic
import pytest

from agentrt.plugins.demo_tools import SLEEP_LOG_FILE
from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.proto.toolhost.v1.tool_host_service_pb2 import (
    CancelOperationRequest,
    GetOperationRequest,
    InvokeToolRequest,
    InvokeToolResponse,
)
from agentrt.proto.toolhost.v1.tool_host_service_pb2_grpc import ToolHostServiceStub
from agentrt.testing import spawn_tool_host
from agentrt.toolhost import (
    SideEffect,
    Tool,
    ToolContext,
    ToolHost,
    TransientError,
    get_plugin_manager,
    tool,
)
from agentrt.toolhost._host import LEDGER_FILE
from agentrt.toolhost._ledger import Ledger, OperationRecord, OperationStatus


class State:
    def __init__(self) -> None:
        self.executions: collections.Counter[str] = collections.Counter()
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = False
        self.saw_signal = False


STATE = State()


class Args(pydantic.BaseModel):
    value: int = 0


@tool(
    name="gate.read", description="Reads until released.", side_effect=SideEffect.READ_ONLY, idempotent=True
)
async def gate_read(args: Args, ctx: ToolContext) -> dict[str, int]:
    STATE.executions[ctx.idempotency_key] += 1
    STATE.started.set()
    try:
        await STATE.release.wait()
    except asyncio.CancelledError:
        STATE.cancelled = True
        STATE.saw_signal = ctx.is_cancelled()
        raise
    return {"value": args.value}


@tool(name="flaky.read", description="Fails once.", side_effect=SideEffect.READ_ONLY, idempotent=True)
def flaky_read(args: Args, ctx: ToolContext) -> int:
    STATE.executions[ctx.idempotency_key] += 1
    if STATE.executions[ctx.idempotency_key] == 1:
        raise TransientError("dependency down")
    return STATE.executions[ctx.idempotency_key]


@tool(name="plain.read", description="Read-only, not idempotent.", side_effect=SideEffect.READ_ONLY)
async def plain_read(args: Args, ctx: ToolContext) -> int:
    STATE.started.set()
    await STATE.release.wait()
    return args.value


@tool(
    name="short.read", description="Overruns.", side_effect=SideEffect.READ_ONLY, idempotent=True, timeout=0.3
)
async def short_read(args: Args, ctx: ToolContext) -> int:
    await STATE.release.wait()
    return 1


TOOLS: list[Tool] = [gate_read, flaky_read, plain_read, short_read]


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[ToolHost]:
    global STATE
    STATE = State()
    pm = get_plugin_manager(entrypoints=False)
    host = ToolHost(tools={t.name: t for t in TOOLS}, data_dir=tmp_path, pm=pm, cancel_grace=0.3)
    await host.start("127.0.0.1:0")
    try:
        yield host
    finally:
        STATE.release.set()
        await host.stop(grace=1.0)


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
    key: str,
    timeout: float = 10.0,
    metadata: Sequence[tuple[str, str]] = (),
) -> Any:
    request = InvokeToolRequest(tool=tool_name, arguments_json=json.dumps(args or {}))
    return stub.InvokeTool(request, metadata=[("x-agentrt-idempotency-key", key), *metadata], timeout=timeout)


def _entry(data_dir: Path, key: str) -> OperationRecord | None:
    with Ledger(data_dir / LEDGER_FILE, owner="reader") as ledger:
        return ledger.get(key)


def _code(response: InvokeToolResponse) -> str:
    assert response.HasField("error"), response
    return tool_pb2.ToolErrorCode.Name(response.error.code)


async def _operation(stub: ToolHostServiceStub, key: str) -> tool_pb2.Operation:
    return (await stub.GetOperation(GetOperationRequest(idempotency_key=key), timeout=5)).operation


async def _wait_for(predicate: Any, *, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_a_read_in_flight_has_no_entry_and_its_outcome_is_written_once(
    stub: ToolHostServiceStub, tmp_path: Path
) -> None:
    call = asyncio.ensure_future(_invoke(stub, "gate.read", {"value": 3}, key="r-1"))
    await asyncio.wait_for(STATE.started.wait(), 5)
    assert _entry(tmp_path, "r-1") is None  # no RUNNING write
    # This host knows it runs: GetOperation answers RUNNING from the running call.
    running = await _operation(stub, "r-1")
    assert (running.status, running.tool) == (tool_pb2.OPERATION_STATUS_RUNNING, "gate.read")
    STATE.release.set()
    first = await call
    record = _entry(tmp_path, "r-1")
    assert record is not None and record.status is OperationStatus.SUCCEEDED and record.executions == 1
    again = await _invoke(stub, "gate.read", {"value": 3}, key="r-1")
    assert (again.replayed, again.result_json) == (True, first.result_json)
    assert STATE.executions["r-1"] == 1


async def test_a_read_only_tool_that_is_not_idempotent_still_records_running(
    stub: ToolHostServiceStub, tmp_path: Path
) -> None:
    call = asyncio.ensure_future(_invoke(stub, "plain.read", key="p-1"))
    await asyncio.wait_for(STATE.started.wait(), 5)
    record = _entry(tmp_path, "p-1")
    assert record is not None and record.status is OperationStatus.RUNNING
    STATE.release.set()
    assert not (await call).HasField("error")


async def test_a_duplicate_read_waits_for_the_one_in_flight_and_replays(
    stub: ToolHostServiceStub, host: ToolHost
) -> None:
    first = asyncio.ensure_future(_invoke(stub, "gate.read", {"value": 5}, key="r-2"))
    await asyncio.wait_for(STATE.started.wait(), 5)
    second = asyncio.ensure_future(_invoke(stub, "gate.read", {"value": 5}, key="r-2"))
    await _wait_for(lambda: host.counters["in_flight_waits"] == 1)
    # Other arguments under the key in flight: a conflict, as with a RUNNING entry.
    other = await _invoke(stub, "gate.read", {"value": 6}, key="r-2")
    assert _code(other) == "TOOL_ERROR_CODE_KEY_CONFLICT"
    STATE.release.set()
    one, two = await asyncio.gather(first, second)
    assert (one.replayed, two.replayed) == (False, True) and one.result_json == two.result_json
    assert STATE.executions["r-2"] == 1


async def test_a_duplicate_read_gives_up_at_its_deadline(stub: ToolHostServiceStub) -> None:
    first = asyncio.ensure_future(_invoke(stub, "gate.read", key="r-3"))
    await asyncio.wait_for(STATE.started.wait(), 5)
    second = await _invoke(stub, "gate.read", key="r-3", timeout=1.0)
    assert _code(second) == "TOOL_ERROR_CODE_TRANSIENT"
    assert json.loads(second.error.details_json) == {"still_running": True, "deadline_exceeded": True}
    STATE.release.set()
    assert not (await first).HasField("error")


async def test_cancel_operation_stops_a_read_in_flight(stub: ToolHostServiceStub, tmp_path: Path) -> None:
    call = asyncio.ensure_future(_invoke(stub, "gate.read", key="r-4"))
    await asyncio.wait_for(STATE.started.wait(), 5)
    asked = await stub.CancelOperation(CancelOperationRequest(idempotency_key="r-4", reason="x"), timeout=5)
    assert asked.signalled and asked.operation.status == tool_pb2.OPERATION_STATUS_RUNNING
    assert _code(await call) == "TOOL_ERROR_CODE_CANCELLED"
    assert STATE.cancelled and STATE.saw_signal  # signalled first, cancelled after the grace
    record = _entry(tmp_path, "r-4")
    assert record is not None and record.status is OperationStatus.FAILED
    # Cancelled is retryable: the same key runs again, over the recorded failure.
    STATE.release.set()
    again = await _invoke(stub, "gate.read", key="r-4")
    assert not again.replayed and not again.HasField("error")
    record = _entry(tmp_path, "r-4")
    assert record is not None and record.status is OperationStatus.SUCCEEDED and record.executions == 2


async def test_the_deadline_cuts_a_read_with_the_typed_timeout_recorded_once(
    stub: ToolHostServiceStub, tmp_path: Path
) -> None:
    response = await _invoke(stub, "short.read", key="r-6")
    assert _code(response) == "TOOL_ERROR_CODE_TRANSIENT"
    assert json.loads(response.error.details_json) == {"effect": "unknown", "deadline_exceeded": True}
    record = _entry(tmp_path, "r-6")
    assert record is not None and record.status is OperationStatus.FAILED and record.executions == 1


async def test_a_read_after_a_transient_failure_runs_again(stub: ToolHostServiceStub, tmp_path: Path) -> None:
    assert _code(await _invoke(stub, "flaky.read", key="r-5")) == "TOOL_ERROR_CODE_TRANSIENT"
    again = await _invoke(stub, "flaky.read", key="r-5")
    assert (again.result_json, again.replayed) == ("2", False)
    assert (await _invoke(stub, "flaky.read", key="r-5")).replayed
    record = _entry(tmp_path, "r-5")
    assert record is not None and record.executions == 2


async def test_a_stale_fencing_token_fences_a_read_before_it_runs(stub: ToolHostServiceStub) -> None:
    run = ("x-agentrt-run-id", "run-f")
    newer = await _invoke(stub, "flaky.read", key="f-1", metadata=[run, ("x-agentrt-fencing-token", "3")])
    assert _code(newer) == "TOOL_ERROR_CODE_TRANSIENT"  # ran (its first, failing, time)
    stale = await _invoke(stub, "flaky.read", key="f-2", metadata=[run, ("x-agentrt-fencing-token", "2")])
    assert _code(stale) == "TOOL_ERROR_CODE_FENCED"
    assert "f-2" not in STATE.executions


async def test_get_and_cancel_of_a_read_neither_running_nor_recorded_are_not_found(
    stub: ToolHostServiceStub,
) -> None:
    for rpc in (
        stub.GetOperation(GetOperationRequest(idempotency_key="r-none"), timeout=5),
        stub.CancelOperation(CancelOperationRequest(idempotency_key="r-none"), timeout=5),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await rpc
        assert info.value.code() == grpc.StatusCode.NOT_FOUND


async def test_after_a_crash_a_read_left_no_entry_and_runs_again(tmp_path: Path) -> None:
    args = {"seconds": 1.0}
    events = tmp_path / SLEEP_LOG_FILE
    with spawn_tool_host(tmp_path, plugins=["agentrt.plugins.demo_tools"]) as host:
        async with grpc.aio.insecure_channel(host.address) as channel:
            call = _invoke(ToolHostServiceStub(channel), "sleep.wait", args, key="crash-r", timeout=30)
            await _wait_for(lambda: events.exists() and "started crash-r" in events.read_text())
            host.kill()
            assert host.wait() == -signal.SIGKILL
            with pytest.raises(grpc.aio.AioRpcError):
                await call
    assert _entry(tmp_path, "crash-r") is None  # nothing to settle: the runtime just sends it again
    with spawn_tool_host(tmp_path, plugins=["agentrt.plugins.demo_tools"]) as host:
        async with grpc.aio.insecure_channel(host.address) as channel:
            stub = ToolHostServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await _operation(stub, "crash-r")
            assert info.value.code() == grpc.StatusCode.NOT_FOUND
            response = await _invoke(stub, "sleep.wait", args, key="crash-r")
            operation = await _operation(stub, "crash-r")
    assert (json.loads(response.result_json)["slept"], response.replayed) == (1.0, False)
    assert operation.status == tool_pb2.OPERATION_STATUS_SUCCEEDED
    assert events.read_text().splitlines() == ["started crash-r", "started crash-r", "finished crash-r"]


async def test_a_read_whose_outcome_cannot_be_recorded_answers_and_leaves_no_entry(
    stub: ToolHostServiceStub, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="agentrt.toolhost._operations")
    call = asyncio.ensure_future(_invoke(stub, "gate.read", {"value": 7}, key="r-7"))
    await asyncio.wait_for(STATE.started.wait(), 5)
    # The table away while the read runs: its one write fails (an sqlite3 error), as a full disk would.
    with sqlite3.connect(tmp_path / LEDGER_FILE) as db:
        db.execute("ALTER TABLE operations RENAME TO operations_away")
    STATE.release.set()
    assert json.loads((await call).result_json) == {"value": 7}  # the caller still gets its answer
    assert "cannot record the outcome of gate.read (key r-7)" in caplog.text
    with sqlite3.connect(tmp_path / LEDGER_FILE) as db:
        db.execute("ALTER TABLE operations_away RENAME TO operations")
    assert _entry(tmp_path, "r-7") is None  # nothing recorded: a retry simply runs the read again
    again = await _invoke(stub, "gate.read", {"value": 7}, key="r-7")
    assert not again.replayed and STATE.executions["r-7"] == 2
