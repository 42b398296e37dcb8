"""The OTLP wire encoder of spans writes what the OTLP exporter's own encoder writes.

Spans are made by a real SDK provider (attributes cleaned as the SDK cleans them), then encoded by
both; the requests must be equal field by field, for every field and value type OTLP has.
"""

from __future__ import annotations

import logging

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from agentrt.toolhost import _otlp_wire
from agentrt.toolhost._otlp_wire import WireSpanExporter, encode_spans_request
from agentrt.toolhost.tracing import TracingOptions, build_provider


def _provider(
    exporter: InMemorySpanExporter, resource: Resource, limits: SpanLimits | None = None
) -> TracerProvider:
    provider = TracerProvider(resource=resource, span_limits=limits)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def _assert_same(spans: tuple[ReadableSpan, ...] | list[ReadableSpan]) -> None:
    ours = encode_spans_request(spans)
    theirs = encode_spans(spans)
    assert ExportTraceServiceRequest.FromString(ours) == theirs
    assert len(ours) == theirs.ByteSize()


def test_every_field_and_value_type_encodes_as_the_exporter_encodes_it() -> None:
    exporter = InMemorySpanExporter()
    first = _provider(exporter, Resource.create({"service.name": "a", "deployment": "x"}))
    second = _provider(
        exporter,
        Resource({"service.name": "b"}, schema_url="https://opentelemetry.io/schemas/1.21.0"),
        SpanLimits(max_span_attributes=3, max_events=1, max_links=1),
    )
    remote = SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=TraceState([("vendor", "v1"), ("other", "o2")]),
    )
    parent = trace.set_span_in_context(trace.NonRecordingSpan(remote))
    tracer = first.get_tracer("agentrt.runtime", "1.2.3", schema_url="https://x/schema", attributes={"s": 1})
    values = {
        "str": "text é ✓",
        "empty": "",
        "true": True,
        "false": False,
        "zero": 0,
        "int": 300,
        "negative": -7,
        "big": 2**62,
        "float": 1.5,
        "neg_float": -0.0,
        "strs": ("a", "b"),
        "ints": [1, -2, 3],
        "bools": (True, False),
        "floats": (0.25,),
        "empty_seq": (),
    }
    with tracer.start_as_current_span(
        "remote child", context=parent, kind=SpanKind.SERVER, attributes=values
    ) as s:
        s.add_event("agentrt.wait", {"seconds": 0.5, "why": "backoff"})
        s.add_event("bare")
        s.set_status(Status(StatusCode.ERROR, "TOOL_ERROR_CODE_TIMEOUT"))
        with tracer.start_as_current_span("local child", kind=SpanKind.CLIENT) as child:
            child.set_status(Status(StatusCode.OK))
    for kind in SpanKind:
        with first.get_tracer("other").start_as_current_span(f"kind {kind.name}", kind=kind):
            pass
    limited = second.get_tracer("limited")
    links = [Link(remote, {"link.attr": "x"}), Link(remote)]
    with limited.start_as_current_span(
        "dropping", attributes={f"k{i}": i for i in range(5)}, links=links
    ) as s:
        s.add_event("one")
        s.add_event("two")
    with limited.start_as_current_span(""):  # an empty name is the proto default
        pass
    spans = exporter.get_finished_spans()
    assert spans[-2].dropped_attributes and spans[-2].dropped_events and spans[-2].dropped_links
    _assert_same(spans)
    _assert_same([])


def test_values_the_sdk_would_not_make_encode_alike_or_are_left_out_alike(
    caplog: pytest.LogCaptureFixture,
) -> None:
    context = SpanContext(trace_id=1, span_id=2, is_remote=False)
    span = ReadableSpan(
        name="built by hand",
        context=context,
        parent=SpanContext(trace_id=1, span_id=3, is_remote=False),
        resource=Resource.create({}),
        attributes={
            "bytes": b"\x00\xff",
            "mapping": {"inner": "v", "n": 2, "nested": {"x": [1, 2]}},
            "none_in_seq": ("a", None),
            "object": object(),  # no OTLP type: the exporter logs it and leaves it out
            "after": "kept",
        },
        kind=SpanKind.INTERNAL,
        start_time=10,
        end_time=20,
    )
    with caplog.at_level(logging.CRITICAL):
        _assert_same([span])
    assert b"after" in encode_spans_request([span]) and b"object" not in encode_spans_request([span])


def test_cached_attributes_keep_their_types_apart_and_a_full_cache_starts_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_otlp_wire, "_CACHE_MAX", 4)
    monkeypatch.setattr(_otlp_wire, "_cache", {})
    exporter = InMemorySpanExporter()
    tracer = _provider(exporter, Resource.create({})).get_tracer("t")
    # True == 1 == 1.0 in a dict key: the type keeps their encodings apart.
    for value in (True, 1, 1.0, "1", 1, True):
        with tracer.start_as_current_span("s", attributes={"same.key": value, "other": value}):
            pass
    for i in range(10):  # more distinct attributes than the cache holds
        with tracer.start_as_current_span("s", attributes={f"key{i}": i}):
            pass
    assert len(_otlp_wire._cache) <= 4
    spans = exporter.get_finished_spans()
    _assert_same(spans)
    _assert_same(spans)  # again, from the cache


def test_the_grpc_exporter_built_from_the_options_encodes_on_the_wire() -> None:
    provider = build_provider(TracingOptions(exporter="otlp", protocol="grpc"), default_service_name="x")
    assert provider is not None
    try:
        exporters = [p.span_exporter for p in provider._active_span_processor._span_processors]  # type: ignore[attr-defined]
        assert any(isinstance(e, WireSpanExporter) for e in exporters)
        exporter = next(e for e in exporters if isinstance(e, WireSpanExporter))
        recorded = InMemorySpanExporter()
        with (
            _provider(recorded, Resource.create({}))
            .get_tracer("t")
            .start_as_current_span("s", attributes={"a": 1})
        ):
            pass
        request = exporter._translate_data(recorded.get_finished_spans())
        assert request == encode_spans(recorded.get_finished_spans())
    finally:
        provider.shutdown()


def test_equal_resources_of_distinct_objects_share_one_group_in_span_order() -> None:
    exporter = InMemorySpanExporter()
    providers = [_provider(exporter, Resource({"service.name": "same"})) for _ in range(2)]
    other = _provider(exporter, Resource({"service.name": "other"}))
    for provider in (providers[0], other, providers[1], providers[0]):
        with provider.get_tracer("t").start_as_current_span("s"):
            pass
    spans = exporter.get_finished_spans()
    assert spans[0].resource is not spans[2].resource and spans[0].resource == spans[2].resource
    request = ExportTraceServiceRequest.FromString(encode_spans_request(spans))
    assert len(request.resource_spans) == 2
    _assert_same(spans)
