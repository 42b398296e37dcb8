"""The tool host's handlers parse their own requests: wrapped once, at registration."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from agentrt.proto.toolhost.v1 import tool_host_service_pb2_grpc
from agentrt.toolhost._parse import add_parsing_in_handler


class RecordingServer:
    """What add_parsing_in_handler registers, kept for a look."""

    def __init__(self) -> None:
        self.generic: list[Any] = []
        self.registered: dict[str, dict[str, grpc.RpcMethodHandler[Any, Any]]] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        self.generic.extend(handlers)

    def add_registered_method_handlers(self, service: str, handlers: Any) -> None:
        self.registered[service] = dict(handlers)


def test_unary_handlers_take_bytes_and_other_handlers_stay_as_they_are() -> None:
    streaming = grpc.unary_stream_rpc_method_handler(lambda r, c: iter(()), request_deserializer=bytes)

    def add(servicer: Any, server: Any) -> None:
        tool_host_service_pb2_grpc.add_ToolHostServiceServicer_to_server(servicer, server)
        server.add_registered_method_handlers("other.Service", {"Watch": streaming})

    server = RecordingServer()
    add_parsing_in_handler(add, tool_host_service_pb2_grpc.ToolHostServiceServicer(), server)  # type: ignore[arg-type]
    service = server.registered["agentrt.toolhost.v1.ToolHostService"]
    assert set(service) == {"ListTools", "InvokeTool", "GetOperation", "PreviewTool", "CancelOperation"}
    assert all(h.unary_unary is not None and h.request_deserializer is None for h in service.values())
    assert all(h.response_serializer is not None for h in service.values())
    assert server.registered["other.Service"] == {"Watch": streaming}
    assert len(server.generic) == 2  # one generic handler per service, as generated code adds


def test_generated_code_that_registers_no_method_handlers_is_refused() -> None:
    def add(servicer: Any, server: Any) -> None:
        server.add_generic_rpc_handlers(())  # an older generator: generic handlers only

    with pytest.raises(RuntimeError, match="registered no method handlers"):
        add_parsing_in_handler(add, object(), RecordingServer())  # type: ignore[arg-type]
