"""supports_query is true only when the host can answer, and the query hook sees the plugin's options.

A real tool host over loopback gRPC, in-process, with plugins defined here. An "orphan" is a
ledger entry left RUNNING by an earlier host process that died while its tool ran.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc.aio
import pydantic
import pytest

from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.proto.toolhost.v1.tool_host_service_pb2 import GetOperationRequest, ListToolsRequest
from agentrt.proto.toolhost.v1.tool_host_service_pb2_grpc import ToolHostServiceStub
from agentrt.toolhost import (
    SideEffect,
    Tool,
    ToolContext,
    ToolHost,
    ToolHostConfig,
    collect_tools,
    get_plugin_manager,
    hookimpl,
    tool,
)
from agentrt.toolhost._ledger import Ledger


class Args(pydantic.BaseModel):
    value: int = 0


def _write(name: str, **declared: Any) -> Tool:
    def body(args: Args, ctx: ToolContext) -> int:
        return args.value

    return tool(name=name, description=name, side_effect=SideEffect.WRITE, **declared)(body)


class Answering:
    """A plugin whose write keeps its effects in a store named by a plugin option."""

    seen: list[dict[str, Any]]

    def __init__(self) -> None:
        self.seen = []

    @hookimpl
    def agentrt_register_tools(self, config: ToolHostConfig) -> list[Tool]:
        return [_write("ledgered.write")]

    @hookimpl
    def agentrt_query_operation(
        self, tool: str, idempotency_key: str, data_dir: Path, config: ToolHostConfig
    ) -> dict[str, Any] | None:
        self.seen.append({"tool": tool, "key": idempotency_key, "options": dict(config.options)})
        store = Path(config.options["store"])
        effects = json.loads(store.read_text()) if store.exists() else {}
        if idempotency_key in effects:
            return {"status": "succeeded", "result": effects[idempotency_key]}
        return {"status": "absent"}


class Silent:
    """A plugin whose tools nobody can answer for after a host crash."""

    @hookimpl
    def agentrt_register_tools(self, config: ToolHostConfig) -> list[Tool]:
        def read(args: Args, ctx: ToolContext) -> int:
            return 0

        return [
            _write("plain.write"),
            _write("promised.write", supports_query=True),
            _write("refused.write", supports_query=False),
            tool(name="plain.read", description="r", side_effect=SideEffect.READ_ONLY)(read),
        ]


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[ToolHostServiceStub, Answering, Path]]:
    answering = Answering()
    pm = get_plugin_manager(entrypoints=False)
    pm.register(answering, name="answering")
    pm.register(Silent(), name="silent")
    store = tmp_path / "effects.json"
    config = ToolHostConfig(data_dir=tmp_path / "data", options={"store": str(store)})
    tools = collect_tools(pm, config)
    host = ToolHost(tools=tools, data_dir=config.data_dir, pm=pm, config=config)
    await host.start("127.0.0.1:0")
    assert host.address
    try:
        async with grpc.aio.insecure_channel(host.address) as channel:
            yield ToolHostServiceStub(channel), answering, config.data_dir
    finally:
        await host.stop(grace=1.0)


async def test_list_tools_says_supports_query_only_where_someone_can_answer(
    served: tuple[ToolHostServiceStub, Answering, Path],
) -> None:
    stub, _, _ = served
    listed = await stub.ListTools(ListToolsRequest(), timeout=5)
    supports = {spec.name: spec.supports_query for spec in listed.tools}
    assert supports == {
        "ledgered.write": True,  # its own plugin implements the query hook
        "plain.write": False,  # no hook in its plugin: nobody could answer after a host crash
        "promised.write": True,  # declared, and a hook exists on this host
        "refused.write": False,  # declared false
        "plain.read": True,  # read-only: the ledger's answer is "run it again"
    }


def test_a_promise_nobody_can_keep_is_reported_false(caplog: pytest.LogCaptureFixture) -> None:
    pm = get_plugin_manager(entrypoints=False)
    pm.register(Silent(), name="silent")
    tools = collect_tools(pm, ToolHostConfig())
    assert tools["promised.write"].supports_query is False
    assert "declares supports_query but no plugin implements agentrt_query_operation" in caplog.text


def _orphan(data_dir: Path, key: str, tool_name: str) -> None:
    """Leave a RUNNING entry behind, as a host process killed mid-call does."""
    with Ledger(data_dir / "ledger.sqlite", owner="a-dead-host") as ledger:
        ledger.begin(
            idempotency_key=key,
            tool=tool_name,
            input_hash="h",
            run_id="r",
            call_id="c",
            rerun_after_crash=False,
        )


async def test_the_query_hook_settles_an_orphan_with_the_plugins_options(
    served: tuple[ToolHostServiceStub, Answering, Path], tmp_path: Path
) -> None:
    stub, answering, data_dir = served
    _orphan(data_dir, "landed", "ledgered.write")
    _orphan(data_dir, "never-ran", "ledgered.write")
    (tmp_path / "effects.json").write_text(json.dumps({"landed": {"refund_id": "RF-9"}}))

    landed = (await stub.GetOperation(GetOperationRequest(idempotency_key="landed"), timeout=5)).operation
    assert landed.status == tool_pb2.OPERATION_STATUS_SUCCEEDED
    assert json.loads(landed.result_json) == {"refund_id": "RF-9"}
    absent = (await stub.GetOperation(GetOperationRequest(idempotency_key="never-ran"), timeout=5)).operation
    assert (absent.status, absent.error.code) == (
        tool_pb2.OPERATION_STATUS_FAILED,
        tool_pb2.TOOL_ERROR_CODE_TRANSIENT,
    )
    assert answering.seen[0] == {
        "tool": "ledgered.write",
        "key": "landed",
        "options": {"store": str(tmp_path / "effects.json")},
    }


async def test_an_orphan_of_a_read_only_tool_is_answered_run_it_again(
    served: tuple[ToolHostServiceStub, Answering, Path],
) -> None:
    stub, answering, data_dir = served
    _orphan(data_dir, "read-1", "plain.read")
    operation = (await stub.GetOperation(GetOperationRequest(idempotency_key="read-1"), timeout=5)).operation
    assert (operation.status, operation.error.code) == (
        tool_pb2.OPERATION_STATUS_FAILED,
        tool_pb2.TOOL_ERROR_CODE_TRANSIENT,
    )
    assert answering.seen == []  # no plugin was asked


async def test_an_orphan_nobody_can_answer_for_stays_running(
    served: tuple[ToolHostServiceStub, Answering, Path],
) -> None:
    stub, _, data_dir = served
    _orphan(data_dir, "plain-1", "plain.write")
    operation = (await stub.GetOperation(GetOperationRequest(idempotency_key="plain-1"), timeout=5)).operation
    assert operation.status == tool_pb2.OPERATION_STATUS_RUNNING  # unknown, honestly
