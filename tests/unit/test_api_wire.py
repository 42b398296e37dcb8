"""The event streams' responses as bytes (api/_wire): what a reader parses is the message."""

from __future__ import annotations

import json

import grpc
import pytest
from google.protobuf import message_factory

from agentrt.proto.runtime.v1 import runtime_service_pb2
from agentrt.server.api._convert import event_to_proto
from agentrt.server.api._wire import (
    EVENT_STREAMS,
    SERVICE,
    add_runtime_service,
    batch_response,
    event_bytes,
    single_response,
)
from agentrt.server.core import events as ev
from agentrt.server.store import StoredEvent

RESPONSES = (runtime_service_pb2.RunAgentResponse, runtime_service_pb2.StreamRunEventsResponse)


def _stored(seq: int, text: str) -> StoredEvent:
    payload = json.dumps({"step": seq, "text": text, "latency": "0.012s", "response_id": "resp-1"})
    return StoredEvent("run-1", seq, ev.MODEL_COMPLETED, payload, 1_700_000_000_000 + seq)


@pytest.mark.parametrize("response", RESPONSES)
def test_a_single_response_parses_as_the_event(response: type) -> None:
    stored = _stored(1, "hello")
    parsed = response.FromString(single_response(event_bytes(stored)))
    assert parsed == response(event=event_to_proto(stored))


@pytest.mark.parametrize("response", RESPONSES)
def test_a_batch_parses_as_its_events_in_order_whatever_their_sizes(response: type) -> None:
    # Lengths across the one-, two- and three-byte varints.
    stored = [_stored(seq, "x" * size) for seq, size in enumerate((0, 100, 127, 128, 300, 20_000), start=1)]
    parsed = response.FromString(batch_response(event_bytes(s) for s in stored))
    assert list(parsed.events) == [event_to_proto(s) for s in stored]
    assert not parsed.HasField("event")


def test_the_runtime_service_registers_every_method_with_its_kind() -> None:
    class Capture:
        generic: tuple[object, ...] = ()
        registered: dict[str, grpc.RpcMethodHandler] = {}

        def add_generic_rpc_handlers(self, handlers: tuple[object, ...]) -> None:
            self.generic = handlers

        def add_registered_method_handlers(
            self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
        ) -> None:
            assert service == SERVICE.full_name
            self.registered = handlers

    class Servicer:
        def __getattr__(self, name: str) -> object:
            return lambda request, context: None

    capture = Capture()
    add_runtime_service(Servicer(), capture)  # type: ignore[arg-type]
    assert set(capture.registered) == {m.name for m in SERVICE.methods} and len(capture.generic) == 1
    for method in SERVICE.methods:
        handler = capture.registered[method.name]
        assert handler.response_streaming == method.server_streaming and not handler.request_streaming
        assert handler.request_deserializer is not None and handler.response_serializer is not None
        message = handler.request_deserializer(b"")
        assert message.DESCRIPTOR.full_name == method.input_type.full_name
        if method.name in EVENT_STREAMS:
            assert handler.response_serializer(b"\x0a\x00") == b"\x0a\x00"  # bytes go as they are
        response = message_factory.GetMessageClass(method.output_type)
        assert handler.response_serializer(response()) == b""  # a message serializes as usual
