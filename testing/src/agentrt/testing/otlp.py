"""A real OTLP receiver for trace and metric tests: the collector's gRPC services, and OTLP/HTTP.

:class:`OtlpReceiver` is a ``grpc.aio`` server implementing ``TraceService`` and
``MetricsService`` of ``opentelemetry-proto`` (what an OpenTelemetry Collector speaks on 4317),
plus an OTLP/HTTP endpoint (``POST /v1/traces`` and ``/v1/metrics``, protobuf bodies, as on
4318), both on ``127.0.0.1`` free ports. It keeps every span it receives as a :class:`Span`
and every metrics request as it came, for assertions::

    with OtlpReceiver.running() as receiver:           # its own event loop, in a thread
        env["OTEL_TRACES_EXPORTER"] = "otlp"
        env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc"
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.grpc_endpoint  # or receiver.http_endpoint
        ...  # run processes that export to it
        spans = receiver.wait_for_spans(lambda spans: any(s.name == "chat gpt" for s in spans), timeout=10)

Or ``await OtlpReceiver().start()`` / ``await receiver.stop()`` inside an asyncio test. Needs the
``otlp`` extra (``agentrt-testing[otlp]``: ``opentelemetry-proto``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2

__all__ = ["OtlpReceiver", "Span", "spans_of"]

_KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
_MAX_BODY = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Span:
    """One received span: ids as lowercase hex ("" for no parent), attributes as Python values."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: str  # INTERNAL, SERVER, CLIENT, ...
    service_name: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    events: tuple[tuple[str, dict[str, Any]], ...]
    status_code: int  # 0 unset, 1 ok, 2 error
    links: tuple[tuple[str, str], ...] = field(default=())  # (trace_id, span_id) of each link


def _value(value: common_pb2.AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def _attributes(pairs: Sequence[common_pb2.KeyValue]) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs}


def spans_of(request: trace_service_pb2.ExportTraceServiceRequest) -> list[Span]:
    """The spans of one export request."""
    found: list[Span] = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append(
                    Span(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        name=span.name,
                        kind=_KINDS.get(span.kind, str(span.kind)),
                        service_name=str(resource.get("service.name", "")),
                        attributes=_attributes(span.attributes),
                        resource=resource,
                        events=tuple((e.name, _attributes(e.attributes)) for e in span.events),
                        status_code=span.status.code,
                        links=tuple((link.trace_id.hex(), link.span_id.hex()) for link in span.links),
                    )
                )
    return found


class OtlpReceiver(
    trace_service_pb2_grpc.TraceServiceServicer, metrics_service_pb2_grpc.MetricsServiceServicer
):
    """Collects what OTLP exporters send it, over gRPC and over HTTP/protobuf."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._spans: list[Span] = []
        self._metrics: list[metrics_service_pb2.ExportMetricsServiceRequest] = []
        self._server: grpc.aio.Server | None = None
        self._http: asyncio.Server | None = None
        self.grpc_endpoint = ""  # http://127.0.0.1:PORT, for OTEL_EXPORTER_OTLP_ENDPOINT with grpc
        self.http_endpoint = ""  # http://127.0.0.1:PORT, for it with http/protobuf
        self.http_paths: list[str] = []  # the path of every HTTP request, in order
        self._connections: set[asyncio.Task[None]] = set()  # open HTTP keep-alive connections

    # -- what was received -------------------------------------------------------------------------

    @property
    def spans(self) -> list[Span]:
        with self._lock:
            return list(self._spans)

    @property
    def metrics(self) -> list[metrics_service_pb2.ExportMetricsServiceRequest]:
        with self._lock:
            return list(self._metrics)

    def wait_for_spans(self, done: Callable[[list[Span]], bool], *, timeout: float = 10.0) -> list[Span]:
        """Block until ``done(spans)`` holds for the spans received so far; returns them.

        Raises:
            TimeoutError: not within ``timeout`` seconds (the message lists what arrived).
        """
        deadline = time.monotonic() + timeout
        with self._changed:
            while not done(list(self._spans)):
                left = deadline - time.monotonic()
                if left <= 0:
                    names = sorted({f"{s.service_name}:{s.name}" for s in self._spans})
                    raise TimeoutError(f"the spans wanted did not arrive within {timeout}s; got {names}")
                self._changed.wait(left)
            return list(self._spans)

    def _add(self, spans: Sequence[Span] = (), metrics: Any = None) -> None:
        with self._changed:
            self._spans.extend(spans)
            if metrics is not None:
                self._metrics.append(metrics)
            self._changed.notify_all()

    # -- gRPC ---------------------------------------------------------------------------------------

    async def Export(self, request: Any, context: Any) -> Any:
        if isinstance(request, trace_service_pb2.ExportTraceServiceRequest):
            self._add(spans_of(request))
            return trace_service_pb2.ExportTraceServiceResponse()
        self._add(metrics=request)
        return metrics_service_pb2.ExportMetricsServiceResponse()

    async def start(self, host: str = "127.0.0.1") -> OtlpReceiver:
        """Serve gRPC and HTTP on free ports of ``host``."""
        server = grpc.aio.server()
        # One servicer class for both services: each registration routes its own request type here.
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, server)  # type: ignore[no-untyped-call]
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(self, server)  # type: ignore[no-untyped-call]
        port = server.add_insecure_port(f"{host}:0")
        await server.start()
        self._server = server
        self.grpc_endpoint = f"http://{host}:{port}"
        self._http = await asyncio.start_server(self._serve_http, host, 0)
        http_port = self._http.sockets[0].getsockname()[1]
        self.http_endpoint = f"http://{host}:{http_port}"
        return self

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(0)
            self._server = None
        if self._http is not None:
            self._http.close()
            # Keep-alive connections idle in a read: end them, or their sockets outlive the loop.
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            with contextlib.suppress(Exception):
                await self._http.wait_closed()
            self._http = None

    @classmethod
    @contextlib.contextmanager
    def running(cls) -> Iterator[OtlpReceiver]:
        """A receiver serving from its own event loop in a daemon thread (for sync tests)."""
        receiver = cls()
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="otlp-receiver", daemon=True)
        thread.start()
        try:
            asyncio.run_coroutine_threadsafe(receiver.start(), loop).result(timeout=30)
            yield receiver
        finally:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(receiver.stop(), loop).result(timeout=30)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=30)
            loop.close()

    # -- HTTP/protobuf ------------------------------------------------------------------------------

    async def _serve_http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                _, path, _ = line.decode("latin-1").split(" ", 2)
                headers: dict[str, str] = {}
                while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    name, _, value = header.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
                if length > _MAX_BODY:
                    await self._reply(writer, 413, b"")
                    return
                body = await reader.readexactly(length)
                self.http_paths.append(path)
                try:
                    status, answer = self._http_export(path, body, headers.get("content-encoding", ""))
                except (DecodeError, OSError, EOFError):  # not OTLP protobuf (or bad gzip): refused
                    status, answer = 400, b""
                await self._reply(writer, status, answer)
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return
        finally:
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()
            if task is not None:
                self._connections.discard(task)

    def _http_export(self, path: str, body: bytes, encoding: str) -> tuple[int, bytes]:
        if encoding == "gzip":
            import gzip

            body = gzip.decompress(body)
        if path == "/v1/traces":
            request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
            self._add(spans_of(request))
            return 200, trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        if path == "/v1/metrics":
            self._add(metrics=metrics_service_pb2.ExportMetricsServiceRequest.FromString(body))
            return 200, metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
        return 404, b""

    @staticmethod
    async def _reply(writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
        head = (
            f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\n"
            f"Content-Type: application/x-protobuf\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        writer.write(head.encode() + body)
        await writer.drain()
