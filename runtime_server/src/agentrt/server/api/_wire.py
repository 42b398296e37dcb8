"""The event streams' responses, written as bytes made once per event.

A live event is converted and serialized once, whatever the number of its followers
(:meth:`~agentrt.server.events.LiveItem.encoded` caches what :func:`event_bytes` makes), and
each response is those bytes behind a field tag: ``RunAgentResponse`` and
``StreamRunEventsResponse`` carry the event in field 1 and, with ``batch_events``, the events in
the repeated field 2, so a batch is the concatenation of its events' fields. No wrapper message
is built or copied per event, and the two streams send the same bytes.

For that, :func:`add_runtime_service` registers the service with those two methods' response
serializer taking bytes as they are (messages as usual), where the generated registration's
would refuse them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc
from google.protobuf import message_factory

from agentrt.proto.runtime.v1 import runtime_service_pb2
from agentrt.server.api._convert import event_to_proto
from agentrt.server.store import StoredEvent

SERVICE = runtime_service_pb2.DESCRIPTOR.services_by_name["AgentRuntimeService"]
#: The methods whose responses may be bytes made by :func:`single_response` / :func:`batch_response`.
EVENT_STREAMS = frozenset({"RunAgent", "StreamRunEvents"})

_LENGTH_DELIMITED = 2


def _tag(field_name: str) -> bytes:
    numbers = {
        SERVICE.methods_by_name[name].output_type.fields_by_name[field_name].number for name in EVENT_STREAMS
    }
    (number,) = numbers  # both responses number it alike: one set of bytes serves both streams
    return _varint(number << 3 | _LENGTH_DELIMITED)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_EVENT_TAG = _tag("event")
_EVENTS_TAG = _tag("events")


def event_bytes(stored: StoredEvent) -> bytes:
    """The stored event as the API's serialized RunEvent (one function: it keys the live cache)."""
    return event_to_proto(stored).SerializeToString()


def single_response(encoded: bytes) -> bytes:
    """A response carrying one event in ``event``."""
    return _EVENT_TAG + _varint(len(encoded)) + encoded


def batch_response(encoded: Iterable[bytes]) -> bytes:
    """A response carrying the events in ``events``, in order."""
    return b"".join(_EVENTS_TAG + _varint(len(item)) + item for item in encoded)


def _serializer(response: type[Any]) -> Any:
    serialize = response.SerializeToString

    def bytes_or_message(value: Any) -> bytes:
        return value if isinstance(value, bytes) else serialize(value)

    return bytes_or_message


def add_runtime_service(servicer: Any, server: grpc.aio.Server) -> None:
    """Register ``servicer`` for every method of AgentRuntimeService, as the generated
    ``add_AgentRuntimeServiceServicer_to_server`` does, but with the event streams taking bytes."""
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for method in SERVICE.methods:
        if method.client_streaming:  # none today; the generated registration would be needed
            raise TypeError(f"{method.name} streams requests: register it with the generated code")
        request = message_factory.GetMessageClass(method.input_type)
        response = message_factory.GetMessageClass(method.output_type)
        serialize = _serializer(response) if method.name in EVENT_STREAMS else response.SerializeToString
        make = (
            grpc.unary_stream_rpc_method_handler
            if method.server_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        handlers[method.name] = make(
            getattr(servicer, method.name),
            request_deserializer=request.FromString,
            response_serializer=serialize,
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE.full_name, handlers),))
    server.add_registered_method_handlers(SERVICE.full_name, handlers)  # type: ignore[attr-defined]
