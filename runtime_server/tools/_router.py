"""Client side of the tool host contract: which host serves which tool, and one call.

Channel-level retries are off: the runtime's tool scheduler is the one owner of
tool retries (R6.3). Every call carries its deadline and the R3.3 metadata.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc
from google.protobuf import json_format

from agentrt.toolhost.v1 import tool_host_service_pb2 as svc
from agentrt.toolhost.v1 import tool_host_service_pb2_grpc as svc_grpc
from agentrt.toolhost.v1 import tool_pb2

if TYPE_CHECKING:
    from agentrt.toolhost.v1.tool_host_service_pb2_grpc import ToolHostServiceAsyncStub

CHANNEL_OPTIONS = (("grpc.enable_retries", 0), ("grpc.max_receive_message_length", 16 * 1024 * 1024))


class ToolHostError(Exception):
    """A tool host could not be reached or answered badly at startup."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CallMetadata:
    """What travels with a call (R3.3)."""

    idempotency_key: str
    run_id: str
    call_id: str
    attempt: int
    fencing_token: int
    traceparent: str = ""

    def pairs(self) -> tuple[tuple[str, str], ...]:
        pairs = (
            ("x-agentrt-idempotency-key", self.idempotency_key),
            ("x-agentrt-run-id", self.run_id),
            ("x-agentrt-call-id", self.call_id),
            ("x-agentrt-attempt", str(self.attempt)),
            ("x-agentrt-fencing-token", str(self.fencing_token)),
        )
        return (*pairs, ("traceparent", self.traceparent)) if self.traceparent else pairs


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """Result JSON or a typed error (proto3 JSON shape of ToolError)."""

    result_json: str | None
    error: dict[str, str] | None
    replayed: bool = False
    # The transport failed after the request may have left: the tool host's answer is unknown,
    # so a write must be looked up before it is sent again.
    in_doubt: bool = False

    @classmethod
    def failure(cls, code: str, message: str, *, in_doubt: bool = False) -> ToolOutcome:
        return cls(None, {"code": f"TOOL_ERROR_CODE_{code}", "message": message}, in_doubt=in_doubt)


@dataclass(slots=True)
class _Host:
    name: str
    address: str
    channel: grpc.aio.Channel
    stub: ToolHostServiceAsyncStub


class ToolRouter:
    """Knows every configured tool host and routes calls by tool name."""

    def __init__(self) -> None:
        self._hosts: dict[str, _Host] = {}
        self._specs: dict[str, tuple[tool_pb2.ToolSpec, _Host]] = {}

    async def add_host(self, name: str, address: str, *, timeout_s: float = 10.0) -> list[str]:
        """Connect to a host and learn its tools.

        Raises:
            ToolHostError: unreachable host, or a tool name another host already serves.
        """
        channel = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
        host = _Host(name, address, channel, svc_grpc.ToolHostServiceStub(channel))
        try:
            listed = await host.stub.ListTools(svc.ListToolsRequest(), timeout=timeout_s, wait_for_ready=True)
        except grpc.aio.AioRpcError as exc:
            await channel.close(None)
            raise ToolHostError(
                f"tool host {name!r} at {address} did not answer ListTools: {exc.code().name} {exc.details()}"
            ) from exc
        for spec in listed.tools:
            if spec.name in self._specs:
                await channel.close(None)
                other = self._specs[spec.name][1].name
                raise ToolHostError(f"tool {spec.name!r} is served by both {other!r} and {name!r}")
        self._hosts[name] = host
        for spec in listed.tools:
            self._specs[spec.name] = (spec, host)
        return [spec.name for spec in listed.tools]

    def spec(self, tool: str) -> tool_pb2.ToolSpec | None:
        found = self._specs.get(tool)
        return found[0] if found else None

    def tool_names(self) -> list[str]:
        return sorted(self._specs)

    async def invoke(
        self, tool: str, arguments_json: str, *, metadata: CallMetadata, timeout_s: float
    ) -> ToolOutcome:
        """Send one call. Transport failures become typed outcomes; cancellation propagates."""
        found = self._specs.get(tool)
        if found is None:
            return ToolOutcome.failure("UNKNOWN_TOOL", f"no configured tool host serves {tool!r}")
        _, host = found
        try:
            reply = await host.stub.InvokeTool(
                svc.InvokeToolRequest(tool=tool, arguments_json=arguments_json),
                timeout=timeout_s,
                metadata=metadata.pairs(),
            )
        except grpc.aio.AioRpcError as exc:
            return _transport_failure(exc)
        if reply.WhichOneof("outcome") == "error":
            error = json_format.MessageToDict(reply.error, preserving_proto_field_name=True)
            return ToolOutcome(None, error, reply.replayed)
        return ToolOutcome(reply.result_json, None, reply.replayed)

    async def get_operation(
        self, tool: str, idempotency_key: str, *, metadata: CallMetadata | None = None, timeout_s: float
    ) -> tool_pb2.Operation | None:
        """The host's ledger entry for a key; None when the host has none.

        Raises:
            grpc.aio.AioRpcError: the host could not answer (unreachable, deadline).
        """
        found = self._specs.get(tool)
        if found is None:
            return None
        try:
            reply = await found[1].stub.GetOperation(
                svc.GetOperationRequest(idempotency_key=idempotency_key),
                timeout=timeout_s,
                metadata=metadata.pairs() if metadata is not None else None,
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise
        return reply.operation

    async def preview(self, tool: str, arguments_json: str, *, timeout_s: float) -> str:
        """The tool host's impact summary for approvers; a plain fallback when it cannot give one."""
        found = self._specs.get(tool)
        if found is None:
            return f"{tool} is not served by any tool host"
        try:
            reply = await found[1].stub.PreviewTool(
                svc.PreviewToolRequest(tool=tool, arguments_json=arguments_json), timeout=timeout_s
            )
        except grpc.aio.AioRpcError as exc:
            return f"Would call {tool} with {arguments_json} (no preview: {exc.code().name})"
        return str(reply.impact_summary)

    async def close(self) -> None:
        for host in self._hosts.values():
            await host.channel.close(None)
        self._hosts.clear()
        self._specs.clear()


def _transport_failure(exc: grpc.aio.AioRpcError) -> ToolOutcome:
    code = exc.code()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return ToolOutcome.failure("TRANSIENT", "deadline exceeded before the tool answered", in_doubt=True)
    if code == grpc.StatusCode.UNAVAILABLE:
        return ToolOutcome.failure("TRANSIENT", f"tool host UNAVAILABLE: {exc.details()}", in_doubt=True)
    if code in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ABORTED):
        return ToolOutcome.failure("TRANSIENT", f"tool host {code.name}: {exc.details()}")
    if code == grpc.StatusCode.CANCELLED:
        return ToolOutcome.failure("CANCELLED", "call cancelled")
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return ToolOutcome.failure("INVALID_INPUT", exc.details() or "invalid call")
    return ToolOutcome.failure("PERMANENT", f"tool host {code.name}: {exc.details()}")


def tool_result_text(outcome: ToolOutcome) -> str:
    """What the model sees for an outcome."""
    if outcome.result_json is not None:
        return outcome.result_json
    return json.dumps(outcome.error or {})
