"""TraceContextInterceptor over real gRPC on loopback: a SERVER span per RPC under the caller's
traceparent, current in the handler, with the call's status; health checks are not traced."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest
from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentrt.toolhost.tracing import TraceContextInterceptor

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
seen: list[trace.SpanContext] = []  # the current span inside each handler


async def echo(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
    seen.append(trace.get_current_span().get_span_context())
    if request == b"bad":
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad request")
    if request == b"boom":
        await context.abort(grpc.StatusCode.INTERNAL, "internal error")
    return request


async def count(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[bytes]:
    for i in range(3):
        seen.append(trace.get_current_span().get_span_context())
        yield b"%d" % i


async def finished(exporter: InMemorySpanExporter, n: int = 1) -> tuple[Any, ...]:
    """The finished spans once there are ``n``: the caller may hear the status before the server's
    handler (and its span) has ended."""
    for _ in range(500):
        spans = exporter.get_finished_spans()
        if len(spans) >= n:
            return tuple(spans)
        await asyncio.sleep(0.01)
    raise AssertionError(f"{n} spans never finished: {exporter.get_finished_spans()}")


@pytest.fixture
async def served() -> AsyncIterator[tuple[grpc.aio.Channel, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server = grpc.aio.server(
        interceptors=[TraceContextInterceptor(tracer_name="test", tracer_provider=provider)]
    )
    handlers = {
        "Echo": grpc.unary_unary_rpc_method_handler(echo),
        "Count": grpc.unary_stream_rpc_method_handler(count),
    }
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("test.v1.Probe", handlers)])
    health = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    seen.clear()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield channel, exporter
    finally:
        await channel.close()
        await server.stop(0)
        provider.shutdown()


async def test_a_unary_call_continues_the_callers_trace(
    served: tuple[grpc.aio.Channel, InMemorySpanExporter],
) -> None:
    channel, exporter = served
    echo_call = channel.unary_unary("/test.v1.Probe/Echo")
    assert await echo_call(b"hi", metadata=[("traceparent", PARENT)], timeout=5) == b"hi"
    (span,) = await finished(exporter)
    assert span.name == "test.v1.Probe/Echo"
    assert span.kind is trace.SpanKind.SERVER
    assert span.context.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert span.parent is not None and span.parent.span_id == 0xB7AD6B7169203331 and span.parent.is_remote
    assert dict(span.attributes or {}) == {
        "rpc.system": "grpc",
        "rpc.service": "test.v1.Probe",
        "rpc.method": "Echo",
        "rpc.grpc.status_code": 0,
    }
    assert seen == [span.context]  # the handler ran inside it


async def test_without_a_traceparent_the_call_starts_a_trace(
    served: tuple[grpc.aio.Channel, InMemorySpanExporter],
) -> None:
    channel, exporter = served
    await channel.unary_unary("/test.v1.Probe/Echo")(b"x", timeout=5)
    (span,) = await finished(exporter)
    assert span.parent is None and span.context.is_valid


async def test_a_malformed_traceparent_is_ignored_not_refused(
    served: tuple[grpc.aio.Channel, InMemorySpanExporter],
) -> None:
    channel, exporter = served
    answer = await channel.unary_unary("/test.v1.Probe/Echo")(
        b"x", metadata=[("traceparent", "00-zz-not-a-trace")], timeout=5
    )
    assert answer == b"x"
    (span,) = await finished(exporter)
    assert span.parent is None


async def test_an_aborted_call_marks_its_span_with_the_status(
    served: tuple[grpc.aio.Channel, InMemorySpanExporter],
) -> None:
    channel, exporter = served
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await channel.unary_unary("/test.v1.Probe/Echo")(
            b"bad", metadata=[("traceparent", PARENT)], timeout=5
        )
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    (span,) = await finished(exporter)
    assert span.attributes is not None and span.attributes["rpc.grpc.status_code"] == 3
    assert span.status.status_code is trace.StatusCode.UNSET  # the caller's fault, not the server's
    assert not span.events  # no exception text (a message may quote what the caller sent)
    with pytest.raises(grpc.aio.AioRpcError):
        await channel.unary_unary("/test.v1.Probe/Echo")(b"boom", timeout=5)
    _, failed = await finished(exporter, 2)
    assert failed.attributes is not None and failed.attributes["rpc.grpc.status_code"] == 13
    assert failed.status.status_code is trace.StatusCode.ERROR and failed.status.description == "INTERNAL"
    assert not failed.events


async def test_a_stream_is_one_span_current_for_every_message(
    served: tuple[grpc.aio.Channel, InMemorySpanExporter],
) -> None:
    channel, exporter = served
    call = channel.unary_stream("/test.v1.Probe/Count")(b"", metadata=[("traceparent", PARENT)], timeout=5)
    assert [m async for m in call] == [b"0", b"1", b"2"]
    (span,) = await finished(exporter)
    assert span.name == "test.v1.Probe/Count"
    assert seen == [span.context] * 3


async def test_health_checks_are_not_traced(served: tuple[grpc.aio.Channel, InMemorySpanExporter]) -> None:
    channel, exporter = served
    stub = health_pb2_grpc.HealthStub(channel)
    await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    await channel.unary_unary("/test.v1.Probe/Echo")(b"after", timeout=5)
    (span,) = await finished(exporter)  # the one traced call after it, and nothing else
    assert span.name == "test.v1.Probe/Echo"
