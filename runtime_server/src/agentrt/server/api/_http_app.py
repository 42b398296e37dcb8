"""The HTTP face's ASGI application: Connect routes, ``GET /v1/runs/{id}/events`` (SSE), CORS.

Every route runs through :class:`~agentrt.server.api._http_call.GuardedCall`, so it authenticates
and checks roles and tenant exactly as the gRPC call of the same name. Nothing in a request names
a file or a host: the routes are the service's methods and the one event route.

SSE: each event is ``id: <seq>`` and ``data: <RunEvent as proto JSON>``; a stream-only item
(seq 0) has no ``id`` line, so a browser's ``Last-Event-ID`` stays the last stored seq. It resumes
after ``Last-Event-ID`` (or ``?after=``), sends ``: keepalive`` when idle, and ends with an
``event: end`` once the run is over (call ``EventSource.close()`` on it: a browser reconnects a
stream that simply ends). A refusal before the stream starts is the Connect error JSON with its
HTTP status; one after it is an ``event: agentrt.error`` whose data is that JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from google.protobuf import json_format

from agentrt.proto.runtime.v1 import runtime_service_pb2
from agentrt.proto.runtime.v1.runtime_service_connect import AgentRuntimeServiceASGIApplication
from agentrt.server.api._errors import status_code_for, to_status
from agentrt.server.api._http_call import (
    HTTP_STATUS,
    GuardedCall,
    RawCodec,
    error_json,
    metadata_of,
    status_to_connect,
)
from agentrt.server.config import HttpConfig
from agentrt.server.core import InvalidRequest, NotAuthenticated

__all__ = ["HttpApp"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

access_log = logging.getLogger("agentrt.http.access")
_EVENTS = re.compile(r"^/v1/runs/([^/]+)/events$")
_MAX_SEQ = 2**63 - 1
_ALLOW_HEADERS = (
    "authorization, content-type, connect-protocol-version, connect-timeout-ms, connect-accept-encoding, "
    "content-encoding, accept-encoding, last-event-id, traceparent, tracestate, x-user-agent"
)
_EXPOSE_HEADERS = (
    "grpc-status, grpc-message, grpc-status-details-bin, content-encoding, connect-content-encoding"
)


_METHODS = runtime_service_pb2.DESCRIPTOR.services_by_name["AgentRuntimeService"].methods
# The generated service protocol's method names (snake_case) to the RPC names and their kind.
_BY_SNAKE = {re.sub(r"(?<!^)(?=[A-Z])", "_", m.name).lower(): (m.name, m.server_streaming) for m in _METHODS}


class _Service:
    """The generated Connect service protocol, each method a guarded servicer call."""

    def __init__(self, calls: GuardedCall) -> None:
        self._calls = calls

    def __getattr__(self, snake: str) -> Any:
        if snake not in _BY_SNAKE:
            raise AttributeError(snake)
        name, streaming = _BY_SNAKE[snake]
        calls = self._calls
        if streaming:

            def stream(request: bytes, ctx: Any) -> Any:
                return calls.stream(name, request, metadata_of(ctx.request_headers.allitems()))

            return stream

        async def unary(request: bytes, ctx: Any) -> Any:
            return await calls.unary(name, request, metadata_of(ctx.request_headers.allitems()))

        return unary


class HttpApp:
    """Routes a request to the Connect app or the SSE route, answering CORS and unknown routes."""

    def __init__(self, *, calls: GuardedCall, config: HttpConfig, max_message_bytes: int) -> None:
        self._calls = calls
        self._config = config
        self._origins = frozenset(config.cors_origins)
        self._connect = AgentRuntimeServiceASGIApplication(
            _Service(calls),
            read_max_bytes=max_message_bytes,
            codecs=[RawCodec("proto"), RawCodec("json")],
        )
        self._closing: asyncio.Event | None = None  # made on the serving loop, at the first stream
        self._prefix = (
            "/" + runtime_service_pb2.DESCRIPTOR.services_by_name["AgentRuntimeService"].full_name + "/"
        )

    def close_streams(self) -> None:
        """Drain: end every SSE stream cleanly; its client resumes by Last-Event-ID (elsewhere)."""
        if self._closing is None:
            self._closing = asyncio.Event()
        self._closing.set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # websockets: refused by the server closing the handshake
        started = time.monotonic()
        status = {"code": 0}

        async def logged_send(event: MutableMapping[str, Any]) -> None:
            if event["type"] == "http.response.start":
                status["code"] = event["status"]
                event["headers"] = [*event.get("headers", []), *self._cors_headers(scope)]
            await send(event)

        try:
            await self._route(scope, receive, logged_send)
        finally:
            # The path only: a query string may hold a token (sse_query_token); never logged.
            access_log.info(
                "%s %s %s %.1fms",
                scope["method"],
                scope["path"][:200],
                status["code"],
                (time.monotonic() - started) * 1000,
            )

    def _origin(self, scope: Scope) -> str | None:
        for key, value in scope.get("headers", ()):
            if key == b"origin":
                origin: str = value.decode("latin-1")
                return origin
        return None

    def _cors_headers(self, scope: Scope) -> list[tuple[bytes, bytes]]:
        origin = self._origin(scope)
        if origin is None or origin not in self._origins:
            return []
        return [
            (b"access-control-allow-origin", origin.encode()),
            (b"access-control-expose-headers", _EXPOSE_HEADERS.encode()),
            (b"vary", b"Origin"),
        ]

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        method, path = scope["method"], scope["path"]
        if method == "OPTIONS":
            await self._preflight(scope, send)
        elif path.startswith(self._prefix):
            await self._connect(scope, receive, send)
        elif (found := _EVENTS.match(path)) is not None:
            if method != "GET":
                await _error(
                    send,
                    ConnectError(Code.UNIMPLEMENTED, f"{path} takes GET"),
                    status=405,
                    extra=[(b"allow", b"GET")],
                )
            else:
                await self._events(found.group(1), scope, receive, send)
        else:
            await _error(send, ConnectError(Code.NOT_FOUND, "no such route"), status=404)

    async def _preflight(self, scope: Scope, send: Send) -> None:
        origin = self._origin(scope)
        if origin is None or origin not in self._origins:
            # No CORS headers: the browser refuses the cross-origin call.
            await _error(send, ConnectError(Code.PERMISSION_DENIED, "origin not allowed"), status=403)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 204,
                "headers": [
                    (b"access-control-allow-methods", b"GET, POST"),
                    (b"access-control-allow-headers", _ALLOW_HEADERS.encode()),
                    (b"access-control-max-age", str(self._config.cors_max_age_s).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})

    def _events_metadata(self, scope: Scope, query: dict[str, list[str]]) -> tuple[tuple[str, str], ...]:
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", ())]
        metadata = metadata_of(headers)
        tokens = query.get("access_token")
        if tokens is None:
            return metadata
        if not self._config.sse_query_token:
            raise NotAuthenticated(
                "a token in the query string is refused ([http] sse_query_token is off); "
                "send authorization: Bearer",
                reason="QUERY_TOKEN_REFUSED",
            )
        if len(tokens) != 1 or any(k == "authorization" for k, _ in metadata):
            raise NotAuthenticated("send one credential, not several", reason="MALFORMED_AUTHORIZATION")
        return (*metadata, ("authorization", f"Bearer {tokens[0]}"))

    async def _events(self, run_id: str, scope: Scope, receive: Receive, send: Send) -> None:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        try:
            metadata = self._events_metadata(scope, query)
            # The same call's checks first (auth, role, tenant, the run exists): a refusal is an
            # HTTP status, before any event.
            await self._calls.unary(
                "GetRun", runtime_service_pb2.GetRunRequest(run_id=run_id).SerializeToString(), metadata
            )
            after = _after(scope, query)
        except (InvalidRequest, NotAuthenticated) as exc:
            await _error(send, status_to_connect(status_code_for(exc), to_status(exc), exc.message))
            return
        except ConnectError as exc:
            await _error(send, exc)
            return
        request = runtime_service_pb2.StreamRunEventsRequest(run_id=run_id, after_seq=after, follow=True)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-cache"),
                    (b"x-accel-buffering", b"no"),  # nginx: pass events on as they come
                ],
            }
        )
        if self._closing is None:
            self._closing = asyncio.Event()
        stream = asyncio.ensure_future(self._send_events(request, metadata, send))
        gone = asyncio.ensure_future(_disconnected(receive))
        closing = asyncio.ensure_future(self._closing.wait())
        try:
            await asyncio.wait({stream, gone, closing}, return_when=asyncio.FIRST_COMPLETED)
            if stream.done() and not stream.cancelled() and stream.exception() is not None:
                raise stream.exception()  # type: ignore[misc]
        finally:
            for task in (stream, gone, closing):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _send_events(
        self,
        request: runtime_service_pb2.StreamRunEventsRequest,
        metadata: tuple[tuple[str, str], ...],
        send: Send,
    ) -> None:
        keepalive = object()
        try:
            async for item in self._calls.stream(
                "StreamRunEvents",
                request.SerializeToString(),
                metadata,
                idle_s=self._config.sse_heartbeat_s,
                idle=keepalive,
            ):
                if item is keepalive:
                    chunk = b": keepalive\n\n"
                else:
                    events = [item.event] if item.HasField("event") else list(item.events)
                    chunk = b"".join(_sse(event) for event in events)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            chunk = b"event: end\ndata: {}\n\n"
        except ConnectError as exc:
            chunk = b"event: agentrt.error\ndata: " + error_json(exc) + b"\n\n"
        await send({"type": "http.response.body", "body": chunk, "more_body": True})


def _sse(event: Any) -> bytes:
    data = json_format.MessageToJson(event, indent=None).encode()
    head = f"id: {event.seq}\n".encode() if event.seq > 0 else b""
    return head + b"data: " + data + b"\n\n"


def _after(scope: Scope, query: dict[str, list[str]]) -> int:
    last = [v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"last-event-id"]
    field, values = ("Last-Event-ID", last) if last else ("after", query.get("after", ["0"]))
    if len(values) != 1 or not values[0].isdigit() or not 0 <= int(values[0]) <= _MAX_SEQ:
        raise InvalidRequest(f"{field} must be one event seq (a non-negative integer)", field=field)
    return int(values[0])


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _error(
    send: Send,
    error: ConnectError,
    *,
    status: int | None = None,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    body = error_json(error)
    await send(
        {
            "type": "http.response.start",
            "status": status or HTTP_STATUS.get(error.code, 500),
            "headers": [(b"content-type", b"application/json"), *(extra or [])],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
