"""A hostile caller against a REAL tool host process: every refusal is typed, none is INTERNAL.

Deeply nested or huge arguments are an INVALID_INPUT tool error (InvokeTool) or
INVALID_ARGUMENT (PreviewTool); ids, keys, fencing tokens and tool names out of bounds are
INVALID_ARGUMENT with a BadRequest naming the field; undecodable bytes are INVALID_ARGUMENT. After
each, the host still serves an ordinary call.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status

from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.proto.toolhost.v1.tool_host_service_pb2 import (
    GetOperationRequest,
    InvokeToolRequest,
    PreviewToolRequest,
)
from agentrt.proto.toolhost.v1.tool_host_service_pb2_grpc import ToolHostServiceStub
from agentrt.testing import ToolHostProcess, spawn_tool_host
from agentrt.toolhost import SERVICE_NAME

KEY = "x-agentrt-idempotency-key"


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolHostProcess]:
    with spawn_tool_host(tmp_path_factory.mktemp("toolhost"), plugins=["agentrt.plugins.demo_tools"]) as host:
        yield host


@pytest.fixture
def stub(host: ToolHostProcess) -> Iterator[ToolHostServiceStub]:
    with grpc.insecure_channel(host.address) as channel:
        yield ToolHostServiceStub(channel)


def _fields(error: grpc.RpcError) -> list[str]:
    call: Any = error
    status = rpc_status.from_call(call)
    fields: list[str] = []
    for detail in status.details if status else []:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            fields += [v.field for v in bad.field_violations]
    trailers = sum(len(k) + len(v) for k, v in call.trailing_metadata() or ())
    assert trailers < 2048
    return fields


def _still_serves(stub: ToolHostServiceStub) -> None:
    reply = stub.InvokeTool(
        InvokeToolRequest(tool="orders.lookup", arguments_json='{"order_id": "A100"}'),
        metadata=[(KEY, uuid.uuid4().hex)],
        timeout=10,
    )
    assert reply.HasField("result_json") or reply.HasField("error")
    assert not reply.HasField("error") or reply.error.code != tool_pb2.TOOL_ERROR_CODE_UNSPECIFIED


NESTED = [
    "[" * 100_000 + "]" * 100_000,  # past Python's recursion limit
    '{"a":' * 500 + "1" + "}" * 500,  # under it, over the depth bound
    '{"order_id": ' + "[" * 70 + "]" * 70 + "}",
    '{"order_id": NaN}',
]


@pytest.mark.parametrize("arguments", NESTED)
def test_deep_or_non_json_arguments_are_an_invalid_input_tool_error(
    stub: ToolHostServiceStub, arguments: str
) -> None:
    reply = stub.InvokeTool(
        InvokeToolRequest(tool="orders.lookup", arguments_json=arguments),
        metadata=[(KEY, uuid.uuid4().hex)],
        timeout=10,
    )
    assert reply.error.code == tool_pb2.TOOL_ERROR_CODE_INVALID_INPUT
    assert len(reply.error.message) < 500
    with pytest.raises(grpc.RpcError) as caught:
        stub.PreviewTool(PreviewToolRequest(tool="orders.lookup", arguments_json=arguments), timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    _still_serves(stub)


def test_huge_arguments_are_an_invalid_input_tool_error(stub: ToolHostServiceStub) -> None:
    arguments = '{"order_id": "' + "x" * (3 * 1024 * 1024) + '", "pad": [' + "1," * 100 + "1]}"
    reply = stub.InvokeTool(
        InvokeToolRequest(tool="orders.lookup", arguments_json=arguments),
        metadata=[(KEY, uuid.uuid4().hex)],
        timeout=30,
    )
    assert reply.error.code == tool_pb2.TOOL_ERROR_CODE_INVALID_INPUT
    assert len(reply.error.message) < 500
    _still_serves(stub)


@pytest.mark.parametrize(
    ("metadata", "field"),
    [
        ([(KEY, "k"), ("x-agentrt-fencing-token", "1" * 30)], "x-agentrt-fencing-token"),
        ([(KEY, "k"), ("x-agentrt-fencing-token", "-1")], "x-agentrt-fencing-token"),
        ([(KEY, "k"), ("x-agentrt-attempt", "9" * 25)], "x-agentrt-attempt"),
        ([(KEY, "k" * 5000)], KEY),
        ([(KEY, "has space")], KEY),
        ([(KEY, "k"), ("x-agentrt-run-id", "r" * 5000)], "x-agentrt-run-id"),
        ([(KEY, "k"), ("x-agentrt-call-id", "c" * 5000)], "x-agentrt-call-id"),
    ],
)
def test_bad_call_metadata_is_invalid_argument(
    stub: ToolHostServiceStub, metadata: list[tuple[str, str]], field: str
) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        stub.InvokeTool(
            InvokeToolRequest(tool="orders.lookup", arguments_json='{"order_id": "A100"}'),
            metadata=metadata,
            timeout=10,
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in _fields(caught.value)
    _still_serves(stub)


@pytest.mark.parametrize("tool", ["t" * 5000, "tool with spaces", "caf\u00e9"])
def test_bad_tool_names_are_invalid_argument(stub: ToolHostServiceStub, tool: str) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        stub.InvokeTool(InvokeToolRequest(tool=tool), metadata=[(KEY, uuid.uuid4().hex)], timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _fields(caught.value) == ["tool"]
    with pytest.raises(grpc.RpcError) as caught:
        stub.PreviewTool(PreviewToolRequest(tool=tool), timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _fields(caught.value) == ["tool"]


@pytest.mark.parametrize("key", ["k" * 5000, "a key", "\u00e9"])
def test_bad_operation_keys_are_invalid_argument(stub: ToolHostServiceStub, key: str) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        stub.GetOperation(GetOperationRequest(idempotency_key=key), timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _fields(caught.value) == ["idempotency_key"]


@pytest.mark.parametrize("garbage", [b"\xff\xff\xff\xff", b"\x0a\x05ab", b"\x0a\x02\xc3\x28"])
@pytest.mark.parametrize("method", ["InvokeTool", "GetOperation", "PreviewTool"])
def test_undecodable_requests_are_invalid_argument(
    host: ToolHostProcess, stub: ToolHostServiceStub, garbage: bytes, method: str
) -> None:
    with grpc.insecure_channel(host.address) as channel:
        rpc = channel.unary_unary(f"/{SERVICE_NAME}/{method}")
        with pytest.raises(grpc.RpcError) as caught:
            rpc(garbage, metadata=[(KEY, uuid.uuid4().hex)], timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _fields(caught.value) == ["request"]
    _still_serves(stub)
