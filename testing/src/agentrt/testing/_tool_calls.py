"""One tool call to a real tool host over its gRPC contract, for a plugin author's tests.

It sends what the runtime sends for a call (the arguments as JSON, the idempotency key in the
call metadata) over a plain loopback channel, so a test exercises the host's validation, ledger
and replay exactly as a run would, without a runtime.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import grpc

from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.proto.toolhost.v1.tool_host_service_pb2 import InvokeToolRequest
from agentrt.proto.toolhost.v1.tool_host_service_pb2_grpc import ToolHostServiceStub

__all__ = ["ToolReply", "call_tool"]

_IDEMPOTENCY_KEY = "x-agentrt-idempotency-key"


@dataclass(frozen=True)
class ToolReply:
    """What the host answered.

    Attributes:
        result: The tool's result (decoded JSON), or None when it failed.
        error_code: ``""`` on success, else the ToolErrorCode name without its prefix
            (``"INVALID_INPUT"``, ``"PERMANENT"``, ``"TRANSIENT"``...).
        error_message: The failure's message.
        details: The failure's structured details.
        replayed: The host answered from its ledger: the tool did not run again.
    """

    result: Any = None
    error_code: str = ""
    error_message: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    replayed: bool = False

    @property
    def ok(self) -> bool:
        return not self.error_code


def call_tool(
    address: str,
    tool: str,
    arguments: dict[str, Any],
    *,
    idempotency_key: str = "",
    timeout_s: float = 10.0,
) -> ToolReply:
    """Call ``tool`` on the host at ``address`` (plain gRPC: a host started without TLS).

    Args:
        address: ``HOST:PORT`` of the host (``ToolHostProcess.address``).
        tool: The tool's name.
        arguments: Its arguments object.
        idempotency_key: The call's key; a fresh one when empty. Send the same key again to see
            the host replay the recorded outcome.
        timeout_s: The call's deadline.

    Raises:
        grpc.RpcError: The host refused the call itself (unknown tool: NOT_FOUND, ...).
    """
    key = idempotency_key or uuid.uuid4().hex
    request = InvokeToolRequest(tool=tool, arguments_json=json.dumps(arguments))
    with grpc.insecure_channel(address) as channel:
        response = ToolHostServiceStub(channel).InvokeTool(
            request, metadata=((_IDEMPOTENCY_KEY, key),), timeout=timeout_s
        )
    if response.HasField("error"):
        error = response.error
        return ToolReply(
            error_code=tool_pb2.ToolErrorCode.Name(error.code).removeprefix("TOOL_ERROR_CODE_"),
            error_message=error.message,
            details=json.loads(error.details_json) if error.details_json else {},
            replayed=response.replayed,
        )
    return ToolReply(result=json.loads(response.result_json), replayed=response.replayed)
