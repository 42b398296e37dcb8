"""One RPC of the HTTP face, run through the gRPC servicer and its interceptors as they are.

The servicer and the interceptors are written against grpc.aio's ``ServicerContext``;
:class:`HttpCallContext` is the part of it they use (metadata, ``abort``, ``write``, ``code``), so
the tracing and authentication interceptors and the servicer decide an HTTP call exactly as a gRPC
one: the same principal, roles, tenant, validation, limits and google.rpc details. ``abort``
raises :class:`HttpAbort`, a ``grpc.aio.AbortError`` (so the interceptors let it through as they
let gRPC's abort through) carrying the same status as a :class:`connectrpc.errors.ConnectError`.

Requests reach the servicer as bytes, parsed by the interceptor after authentication as over
gRPC (:class:`RawCodec`): an anonymous caller's garbage is UNAUTHENTICATED, a caller's garbage
INVALID_ARGUMENT ``MALFORMED_REQUEST``. JSON is the canonical proto3 JSON mapping; unknown fields
are refused, so a misspelt field is an error rather than silently dropped.

mTLS is not available here: uvicorn gives the application no peer certificate, so
``auth_context`` is empty and the HTTP face authenticates by ``authorization`` only.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc
import grpc.aio
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from google.protobuf import json_format, message, message_factory
from google.rpc import status_pb2  # type: ignore[import-untyped]
from protobuf.wkt import Any as WireAny

from agentrt.server.api._errors import unexpected_status
from agentrt.server.api._wire import SERVICE
from agentrt.toolhost.tracing import TraceContextInterceptor

__all__ = [
    "HTTP_STATUS",
    "GuardedCall",
    "HttpAbort",
    "HttpCallContext",
    "RawCodec",
    "error_json",
    "status_to_connect",
]

log = logging.getLogger("agentrt.http")
_DETAILS_KEY = "grpc-status-details-bin"
# Headers the interceptors never see: no credential is read from a cookie (a browser sends it
# unasked, which would make every route a CSRF target), and hop-by-hop headers say nothing.
_DROPPED_HEADERS = frozenset({"cookie", "connection", "content-length", "host", "transfer-encoding"})

#: Connect's HTTP status for each code (connectrpc.com/docs/protocol, "Error Codes").
HTTP_STATUS: Mapping[Code, int] = {
    Code.CANCELED: 499,
    Code.UNKNOWN: 500,
    Code.INVALID_ARGUMENT: 400,
    Code.DEADLINE_EXCEEDED: 504,
    Code.NOT_FOUND: 404,
    Code.ALREADY_EXISTS: 409,
    Code.PERMISSION_DENIED: 403,
    Code.RESOURCE_EXHAUSTED: 429,
    Code.FAILED_PRECONDITION: 400,
    Code.ABORTED: 409,
    Code.OUT_OF_RANGE: 400,
    Code.UNIMPLEMENTED: 501,
    Code.INTERNAL: 500,
    Code.UNAVAILABLE: 503,
    Code.DATA_LOSS: 500,
    Code.UNAUTHENTICATED: 401,
}


def _connect_code(code: grpc.StatusCode) -> Code:
    if code is grpc.StatusCode.CANCELLED:
        return Code.CANCELED  # the one name the two spell differently
    try:
        return Code[code.name]
    except KeyError:
        return Code.UNKNOWN


def status_to_connect(
    code: grpc.StatusCode, status: status_pb2.Status | None, message_text: str
) -> ConnectError:
    """The Connect error of a gRPC status: the same code, message and google.rpc details."""
    details = [WireAny(type_url=d.type_url, value=d.value) for d in (status.details if status else ())]
    return ConnectError(_connect_code(code), status.message if status else message_text, details)


def error_json(error: ConnectError) -> bytes:
    """The Connect protocol's JSON error body (the one connectrpc writes for unary calls)."""
    body: dict[str, Any] = {"code": error.code.value, "message": error.message}
    if error.details:
        body["details"] = [
            {"type": d.type_name, "value": base64.b64encode(d.message_bytes).decode().rstrip("=")}
            for d in error.details
        ]
    return json.dumps(body, separators=(",", ":")).encode()


class HttpAbort(grpc.aio.AbortError):
    """``HttpCallContext.abort``: the call ends with :attr:`error` (never caught as a handler bug)."""

    def __init__(self, error: ConnectError) -> None:
        super().__init__(error.message)
        self.error = error


class JsonBytes(bytes):
    """A request body in proto JSON (plain ``bytes`` are binary protobuf)."""


class RawCodec:
    """A connectrpc codec that hands request bodies on unparsed and encodes responses.

    Parsing happens in the auth interceptor, after authentication (see the module doc).
    """

    def __init__(self, name: str) -> None:
        self._name = name

    def name(self) -> str:
        return self._name

    def encode(self, value: message.Message) -> bytes:
        if self._name == "json":
            return json_format.MessageToJson(value, indent=None).encode()
        return value.SerializeToString()

    def decode(self, data: bytes | bytearray, message_class: type[Any]) -> bytes:
        return JsonBytes(data) if self._name == "json" else bytes(data)


def _parser(request: type[message.Message]) -> Callable[[bytes], message.Message]:
    def parse(data: bytes) -> message.Message:
        if isinstance(data, JsonBytes):
            found = request()
            json_format.Parse(data, found, ignore_unknown_fields=False)
            return found
        return request.FromString(data)

    return parse


class HttpCallContext:
    """The grpc.aio ``ServicerContext`` methods the servicer and the interceptors use."""

    def __init__(
        self,
        *,
        metadata: tuple[tuple[str, str], ...],
        write: Callable[[Any], Awaitable[None]] | None = None,
        response: type[message.Message] | None = None,
    ) -> None:
        self._metadata = metadata
        self._write = write
        self._response = response
        self._code: grpc.StatusCode | None = None

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}  # no peer certificate over HTTP: see the module doc

    def code(self) -> grpc.StatusCode | None:
        return self._code  # read by the tracing interceptor for the span's status

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Iterable[tuple[str, Any]] = ()
    ) -> NoReturn:
        self._code = code
        status = None
        for key, value in trailing_metadata or ():
            if key == _DETAILS_KEY and isinstance(value, bytes):
                status = status_pb2.Status.FromString(value)
        raise HttpAbort(status_to_connect(code, status, details))

    async def write(self, value: Any) -> None:
        if self._write is None:
            raise RuntimeError("write on a unary call")
        if isinstance(value, bytes):  # the event streams' pre-serialized responses (api/_wire)
            assert self._response is not None
            value = self._response.FromString(value)
        await self._write(value)


def metadata_of(headers: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """The call's metadata from its HTTP headers, as gRPC would give it to the interceptors."""
    return tuple((k.lower(), v) for k, v in headers if k.lower() not in _DROPPED_HEADERS)


@dataclass(frozen=True, slots=True)
class _Details:
    method: str
    invocation_metadata: tuple[tuple[str, str], ...]


def _internal() -> ConnectError:
    status = unexpected_status(RuntimeError())
    return status_to_connect(grpc.StatusCode.INTERNAL, status, "internal error")


_END = object()


class GuardedCall:
    """Calls servicer methods through the gRPC server's interceptors (tracing, then auth)."""

    def __init__(
        self, *, servicer: Any, interceptors: tuple[grpc.aio.ServerInterceptor[Any, Any], ...]
    ) -> None:
        self._servicer = servicer
        self._interceptors = interceptors
        self._kinds: dict[str, tuple[bool, type[message.Message], type[message.Message]]] = {}
        for method in SERVICE.methods:
            request = message_factory.GetMessageClass(method.input_type)
            response = message_factory.GetMessageClass(method.output_type)
            self._kinds[method.name] = (method.server_streaming, request, response)

    @staticmethod
    def path(name: str) -> str:
        return f"/{SERVICE.full_name}/{name}"

    async def _handler(
        self, name: str, metadata: tuple[tuple[str, str], ...]
    ) -> grpc.RpcMethodHandler[Any, Any]:
        streaming, request, _ = self._kinds[name]
        behavior = getattr(self._servicer, name)
        make = grpc.unary_stream_rpc_method_handler if streaming else grpc.unary_unary_rpc_method_handler
        handler: grpc.RpcMethodHandler[Any, Any] = make(behavior, request_deserializer=_parser(request))
        details = _Details(self.path(name), metadata)
        # Innermost first: the gRPC server runs its interceptors in list order, the first outermost.
        for interceptor in reversed(self._interceptors):

            async def continuation(_: Any, inner: grpc.RpcMethodHandler[Any, Any] = handler) -> Any:
                return inner

            handler = await interceptor.intercept_service(continuation, details)
        return handler

    async def unary(self, name: str, raw: bytes, metadata: tuple[tuple[str, str], ...]) -> Any:
        """The response of a unary method; raises ConnectError as gRPC would abort."""
        context = HttpCallContext(metadata=metadata)
        try:
            handler = await self._handler(name, metadata)
            assert handler.unary_unary is not None
            return await handler.unary_unary(raw, context)  # type: ignore[arg-type]
        except HttpAbort as exc:
            raise exc.error from None
        except Exception:
            log.exception("HTTP call %s failed outside its handler", name)
            raise _internal() from None

    async def stream(
        self,
        name: str,
        raw: bytes,
        metadata: tuple[tuple[str, str], ...],
        *,
        idle_s: float | None = None,
        idle: Any = None,
    ) -> AsyncIterator[Any]:
        """The responses of a server-streaming method, read as the caller reads them.

        The servicer writes into a queue of one: while the caller does not read, its write stays
        pending, which is what the stall watchdog of ``_stream_writer`` measures (as over gRPC).
        With ``idle_s``, ``idle`` is yielded whenever nothing came for that long (SSE heartbeats).
        """
        _, _, response = self._kinds[name]
        queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=1)
        context = HttpCallContext(metadata=metadata, write=queue.put, response=response)
        try:
            handler = await self._handler(name, metadata)
        except Exception:
            log.exception("HTTP call %s failed outside its handler", name)
            raise _internal() from None
        assert handler.unary_stream is not None
        produced: Any = handler.unary_stream(raw, context)  # type: ignore[arg-type]
        if not asyncio.iscoroutine(produced):  # an async generator (GetPayload): it yields itself
            produced = _drain(produced, queue.put)
        task: asyncio.Future[None] = asyncio.ensure_future(produced)
        try:
            while True:
                get = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({get, task}, timeout=idle_s, return_when=asyncio.FIRST_COMPLETED)
                if get in done:
                    yield get.result()
                    continue
                get.cancel()
                if not done:
                    yield idle
                    continue
                while not queue.empty():
                    yield queue.get_nowait()
                task.result()
                return
        except HttpAbort as exc:
            raise exc.error from None
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task


async def _drain(items: AsyncIterator[Any], put: Callable[[Any], Awaitable[None]]) -> None:
    async for item in items:
        await put(item)


def tracing_interceptor() -> TraceContextInterceptor:
    """The gRPC server's tracing interceptor: an HTTP call continues the caller's traceparent too."""
    return TraceContextInterceptor(tracer_name="agentrt.runtime")
