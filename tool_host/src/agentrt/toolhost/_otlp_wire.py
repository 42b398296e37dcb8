"""OTLP/protobuf encoding of finished spans, written straight to wire bytes.

The OTLP exporter's own encoder builds one protobuf object per span, attribute and value in
Python (~40 us a span on a loaded 2-core machine), in the export thread, under the GIL the event
loop needs. This writes the same ``ExportTraceServiceRequest`` as bytes (a test holds it equal to
the exporter's, field by field), keeping the encoded attributes that repeat from span to span
(the operation, the model, the tool, the run id) in a small cache.

Needs the OpenTelemetry SDK and the OTLP/gRPC exporter (the ``otel`` extra); imported only when
that exporter is built.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.trace import SpanKind

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext

__all__ = ["WireSpanExporter", "encode_spans_request"]

# Field tags (field number << 3 | wire type) of opentelemetry/proto/trace/v1/trace.proto and
# common/v1/common.proto.
_PACK_Q = struct.Struct("<Q").pack
_PACK_I = struct.Struct("<I").pack
_PACK_D = struct.Struct("<d").pack
_SPAN_KIND = {  # SpanKind -> Span.SpanKind enum value
    SpanKind.INTERNAL: 1,
    SpanKind.SERVER: 2,
    SpanKind.CLIENT: 3,
    SpanKind.PRODUCER: 4,
    SpanKind.CONSUMER: 5,
}
_HAS_IS_REMOTE = 0x100  # SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_IS_REMOTE = 0x200  # SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
_CACHE_MAX = 4096  # encoded attributes kept; cleared whole when full (ids churn, names repeat)
_cache: dict[tuple[str, type, Any], bytes] = {}


def _varint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag, the payload's length, the payload."""
    return tag + _varint(len(payload)) + payload


def _any_value(value: Any) -> bytes:
    """An AnyValue's payload, as the SDK's encoder makes it (a oneof: its default is written too).

    Raises:
        TypeError: a value of no OTLP type (the SDK's encoder drops such an attribute too).
    """
    if value is None:
        return b""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _field(b"\x0a", value.encode())
    if isinstance(value, int):
        return b"\x18" + _varint(value if value >= 0 else value + (1 << 64))
    if isinstance(value, float):
        return b"\x21" + _PACK_D(value)
    if isinstance(value, bytes):
        return _field(b"\x3a", value)
    if isinstance(value, Sequence):
        return _field(b"\x2a", b"".join(_field(b"\x0a", _any_value(v)) for v in value))
    if isinstance(value, Mapping):
        return _field(b"\x32", b"".join(_field(b"\x0a", _key_value(str(k), v)) for k, v in value.items()))
    raise TypeError(f"no OTLP value for a {type(value).__name__}")


def _key_value(key: str, value: Any) -> bytes:
    return _field(b"\x0a", key.encode()) + _field(b"\x12", _any_value(value))


def _attributes(tag: bytes, attributes: Mapping[str, Any] | None) -> bytes:
    """Each attribute as a KeyValue field; one of no OTLP type is left out, as the SDK does."""
    if not attributes:
        return b""
    parts = []
    cache = _cache
    for key, value in attributes.items():
        kind = type(value)
        if kind is str or kind is int or kind is bool or kind is float:
            # The type is in the key: True == 1 and 1.0 == 1 hash alike but encode apart.
            cached = cache.get((key, kind, value))
            if cached is None:
                if len(cache) >= _CACHE_MAX:
                    cache.clear()
                cached = cache[(key, kind, value)] = _field(tag, _key_value(key, value))
            parts.append(cached)
            continue
        try:
            parts.append(_field(tag, _key_value(key, value)))
        except TypeError:
            continue
    return b"".join(parts)


def _flags(context: SpanContext | None) -> bytes:
    if context is not None and context.is_remote:
        return _PACK_I(_HAS_IS_REMOTE | _IS_REMOTE)
    return _PACK_I(_HAS_IS_REMOTE)


def _span(span: ReadableSpan) -> bytes:
    context = span.get_span_context()
    assert context is not None  # a recorded span has one
    parent = span.parent
    parts = [
        b"\x0a\x10" + context.trace_id.to_bytes(16, "big"),
        b"\x12\x08" + context.span_id.to_bytes(8, "big"),
    ]
    if context.trace_state:
        state = ",".join(f"{key}={value}" for key, value in context.trace_state.items())
        parts.append(_field(b"\x1a", state.encode()))
    if parent:  # the SDK's test: an invalid parent context is still a parent
        parts.append(b"\x22\x08" + parent.span_id.to_bytes(8, "big"))
    if span.name:
        parts.append(_field(b"\x2a", span.name.encode()))
    parts.append(b"\x30" + _varint(_SPAN_KIND[span.kind]))
    if span.start_time:
        parts.append(b"\x39" + _PACK_Q(span.start_time))
    if span.end_time:
        parts.append(b"\x41" + _PACK_Q(span.end_time))
    parts.append(_attributes(b"\x4a", span.attributes))
    if span.dropped_attributes:
        parts.append(b"\x50" + _varint(span.dropped_attributes))
    for event in span.events:
        body = b"\x09" + _PACK_Q(event.timestamp) if event.timestamp else b""
        if event.name:
            body += _field(b"\x12", event.name.encode())
        body += _attributes(b"\x1a", event.attributes)
        if event.dropped_attributes:
            body += b"\x20" + _varint(event.dropped_attributes)
        parts.append(_field(b"\x5a", body))
    if span.dropped_events:
        parts.append(b"\x60" + _varint(span.dropped_events))
    for link in span.links:
        body = b"\x0a\x10" + link.context.trace_id.to_bytes(16, "big")
        body += b"\x12\x08" + link.context.span_id.to_bytes(8, "big")
        body += _attributes(b"\x22", link.attributes)
        if link.dropped_attributes:
            body += b"\x28" + _varint(link.dropped_attributes)
        body += b"\x35" + _flags(link.context)
        parts.append(_field(b"\x6a", body))
    if span.dropped_links:
        parts.append(b"\x70" + _varint(span.dropped_links))
    status = span.status
    if status is not None:  # the SDK's encoder always writes it, an unset one empty
        body = _field(b"\x12", status.description.encode()) if status.description else b""
        if code := status.status_code.value:
            body += b"\x18" + _varint(code)
        parts.append(_field(b"\x7a", body))
    parts.append(b"\x85\x01" + _flags(parent))  # field 16, fixed32
    return b"".join(parts)


def _resource(resource: Resource) -> bytes:
    return _attributes(b"\x0a", resource.attributes)


def _scope(scope: InstrumentationScope | None) -> bytes:
    if scope is None:
        return b""
    body = _field(b"\x0a", scope.name.encode()) if scope.name else b""
    if scope.version:
        body += _field(b"\x12", scope.version.encode())
    return body + _attributes(b"\x1a", scope.attributes)


def encode_spans_request(spans: Sequence[ReadableSpan]) -> bytes:
    """The serialized ``ExportTraceServiceRequest`` of ``spans``: by resource, then by scope."""
    grouped: dict[Resource, defaultdict[InstrumentationScope | None, list[bytes]]] = {}
    # A Resource hashes by dumping its attributes to JSON: each distinct object is hashed once
    # (equal ones still share a group, spans in their order, as the exporter's encoder has them).
    by_object: dict[int, defaultdict[InstrumentationScope | None, list[bytes]]] = {}
    for span in spans:
        resource = span.resource
        scopes = by_object.get(id(resource))
        if scopes is None:
            scopes = by_object[id(resource)] = grouped.setdefault(resource, defaultdict(list))
        scopes[span.instrumentation_scope or None].append(_span(span))
    out = []
    for resource, scopes in grouped.items():
        body = _field(b"\x0a", _resource(resource))
        for scope, encoded in scopes.items():
            scope_body = _field(b"\x0a", _scope(scope))
            scope_body += b"".join(_field(b"\x12", one) for one in encoded)
            if scope is not None and scope.schema_url:
                scope_body += _field(b"\x1a", scope.schema_url.encode())
            body += _field(b"\x12", scope_body)
        if resource.schema_url:
            body += _field(b"\x1a", resource.schema_url.encode())
        out.append(_field(b"\x0a", body))
    return b"".join(out)


class WireSpanExporter(OTLPSpanExporter):
    """The OTLP/gRPC span exporter (its ``OTEL_EXPORTER_OTLP_*`` settings and retries as they
    are), with its requests encoded by :func:`encode_spans_request`."""

    def _translate_data(self, data: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
        # Parsed back by the C protobuf runtime (~1 us a span): the stub sends a message.
        return ExportTraceServiceRequest.FromString(encode_spans_request(data))
