"""The fake model server of :mod:`agentrt.testing` (see there)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import re
import socket
import struct
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, Self

__all__ = ["FakeModelServer", "FakeResponse", "RecordedRequest", "sse_event"]

logger = logging.getLogger(__name__)

_EVENT_END = re.compile(rb"(?:\r\n|\r|\n)(?:\r\n|\r|\n)")
_REASONS = {529: "Overloaded"}


def sse_event(data: Any, *, event: str | None = None) -> bytes:
    """Encode one server-sent event.

    Args:
        data: A string is sent as is (one ``data:`` line per line of it); anything else as compact JSON.
        event: The ``event:`` field, when set (Anthropic names every event).

    Returns:
        The event's bytes, ending with the blank line that dispatches it.
    """
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    lines = [f"event: {event}"] if event is not None else []
    lines.extend(f"data: {line}" for line in text.split("\n"))
    return ("\n".join(lines) + "\n\n").encode()


@dataclass(frozen=True, kw_only=True)
class FakeResponse:
    """One scripted answer; use a fresh one per request (its events are one-shot).

    Attributes:
        status: HTTP status.
        headers: Response headers (framing headers are added).
        body: The exact body bytes.
        chunks: Byte offsets where the body is cut into separate writes.
        chunked: Send with ``Transfer-Encoding: chunked`` (one HTTP chunk per piece); ``None``
            means chunked for event streams and ``Content-Length`` otherwise.
        pause_at: Byte offset where the server stops, after writing the bytes before it, until
            ``gate`` is set.
        gate: Set by the test to let a paused response go on.
        paused: Set by the server when it reaches ``pause_at``.
        finished: Set by the server once the whole response is written.
        drop_at: Byte offset where the server drops the connection, after writing the bytes before it.
        drop: ``close`` (orderly FIN) or ``reset`` (RST) at ``drop_at``.
        hang: Read the request, then answer nothing until the server stops (for timeouts).
    """

    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    chunks: tuple[int, ...] = ()
    chunked: bool | None = None
    pause_at: int | None = None
    gate: threading.Event = field(default_factory=threading.Event, compare=False)
    paused: threading.Event = field(default_factory=threading.Event, compare=False)
    finished: threading.Event = field(default_factory=threading.Event, compare=False)
    drop_at: int | None = None
    drop: Literal["close", "reset"] = "close"
    hang: bool = False

    @classmethod
    def json_body(
        cls, body: Any, *, status: int = 200, headers: Mapping[str, str] | None = None
    ) -> FakeResponse:
        """An ``application/json`` answer with ``body`` encoded."""
        return cls(
            status=status,
            headers=(("Content-Type", "application/json"), *(headers or {}).items()),
            body=json.dumps(body).encode(),
        )

    @classmethod
    def event_stream(
        cls,
        *events: bytes,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        pause_after: int | None = None,
        drop_after: int | None = None,
        drop: Literal["close", "reset"] = "close",
    ) -> FakeResponse:
        """A ``text/event-stream`` answer, one write per event.

        Args:
            events: Encoded events (see :func:`sse_event`), or any bytes.
            status: HTTP status.
            headers: Extra headers.
            pause_after: Pause after this many events.
            drop_after: Drop the connection after this many events.
            drop: How to drop it.
        """
        offsets, end = [], 0
        for event in events:
            end += len(event)
            offsets.append(end)

        def after(count: int | None) -> int | None:
            return None if count is None else (offsets[count - 1] if count else 0)

        return cls(
            status=status,
            headers=(
                ("Content-Type", "text/event-stream; charset=utf-8"),
                ("Cache-Control", "no-cache"),
                *(headers or {}).items(),
            ),
            body=b"".join(events),
            chunks=tuple(offsets[:-1]),
            pause_at=after(pause_after),
            drop_at=after(drop_after),
            drop=drop,
        )

    def with_pause(self, at: int) -> FakeResponse:
        """A copy that pauses at byte offset ``at``, with fresh events."""
        return dataclasses.replace(
            self, pause_at=at, gate=threading.Event(), paused=threading.Event(), finished=threading.Event()
        )

    def with_drop(self, at: int, drop: Literal["close", "reset"] = "close") -> FakeResponse:
        """A copy that drops the connection at byte offset ``at``, with fresh events."""
        return dataclasses.replace(
            self,
            drop_at=at,
            drop=drop,
            gate=threading.Event(),
            paused=threading.Event(),
            finished=threading.Event(),
        )

    def event_ends(self) -> list[int]:
        """Byte offsets just after each event of the body (after each blank line)."""
        return [match.end() for match in _EVENT_END.finditer(self.body)]

    @property
    def is_chunked(self) -> bool:
        """Whether the body goes out with chunked transfer encoding."""
        if self.chunked is not None:
            return self.chunked
        return any(
            name.lower() == "content-type" and value.startswith("text/event-stream")
            for name, value in self.headers
        )

    def _boundaries(self) -> list[int]:
        size = len(self.body)
        points = {0, size, *(c for c in self.chunks if 0 < c < size)}
        points.update(at for at in (self.pause_at, self.drop_at) if at is not None and 0 <= at <= size)
        return sorted(points)


@dataclass(frozen=True, kw_only=True)
class RecordedRequest:
    """A request the fake server received.

    Attributes:
        method: HTTP method.
        path: Request target, e.g. ``/v1/chat/completions``.
        headers: Headers, names in lower case.
        body: Raw body.
        connection: Serial number of the TCP connection it came on (1, 2, ...): equal numbers
            mean the client reused a kept-alive connection.
    """

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes
    connection: int = 0

    def json(self) -> Any:
        """The body decoded as JSON."""
        return json.loads(self.body)


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins the handlers

    def __init__(self, fake: FakeModelServer, address: tuple[str, int]) -> None:
        self.fake = fake
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away mid-answer is what some tests do on purpose.
        logger.debug("fake model server: handler error for %s", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Each piece must leave at once: Nagle's algorithm would hold small writes back.
    disable_nagle_algorithm = True
    server: _Server
    serial: int

    def setup(self) -> None:
        super().setup()
        self.serial = self.server.fake._track(self.connection, open_=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.fake._track(self.connection, open_=False)

    def do_POST(self) -> None:
        self._serve()

    def do_GET(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def _serve(self) -> None:
        fake = self.server.fake
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {name.lower(): value for name, value in self.headers.items()}
        response = fake._received(
            RecordedRequest(
                method=self.command, path=self.path, headers=headers, body=body, connection=self.serial
            )
        )
        if response.hang:
            fake._wait(fake._stopping)
            self._drop("close")
            return
        self.send_response(response.status, _REASONS.get(response.status))
        for name, value in response.headers:
            self.send_header(name, value)
        chunked = response.is_chunked
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        start = 0
        for end in response._boundaries():
            piece = response.body[start:end]
            if piece:
                self.wfile.write(b"%x\r\n%b\r\n" % (len(piece), piece) if chunked else piece)
            start = end
            if end == response.pause_at:
                response.paused.set()
                if not fake._wait(response.gate):
                    self._drop("close")
                    return
            if end == response.drop_at:
                self._drop(response.drop)
                return
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
        response.finished.set()

    def _drop(self, how: Literal["close", "reset"]) -> None:
        self.close_connection = True
        try:
            if how == "reset":
                # Linger 0: close() sends RST instead of FIN, as a crashed proxy would.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
            else:
                self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # the client is gone already


class FakeModelServer:
    """A scripted HTTP model server on ``127.0.0.1`` and a free port.

    Args:
        responses: Answers to queue, in order (more with :meth:`enqueue`).
        host: Address to listen on.

    Use it as a context manager (``with`` or ``async with``), or call :meth:`start` and :meth:`stop`.
    A request with nothing queued gets ``default(request)`` when given (a server that answers any
    number of calls, for benchmarks), else a 500 whose message says so. ``keep_requests`` bounds
    how many received requests are remembered (the most recent ones).
    """

    def __init__(
        self,
        *responses: FakeResponse,
        host: str = "127.0.0.1",
        default: Callable[[RecordedRequest], FakeResponse] | None = None,
        keep_requests: int | None = None,
    ) -> None:
        self._default = default
        self._keep_requests = keep_requests
        self._lock = threading.Lock()
        self._received_one = threading.Condition(self._lock)
        self._queue: list[FakeResponse] = list(responses)
        self._requests: list[RecordedRequest] = []
        self._connections: set[socket.socket] = set()
        self._connection_count = 0
        self._waiting: set[threading.Event] = set()
        self._stopping = threading.Event()
        self._server = _Server(self, (host, 0))
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fake-model-server", kwargs={"poll_interval": 0.05}
        )

    @property
    def url(self) -> str:
        """``http://<host>:<port>``, without a trailing slash."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def requests(self) -> list[RecordedRequest]:
        """The requests received so far, in order."""
        with self._lock:
            return list(self._requests)

    @property
    def open_connections(self) -> int:
        """Client connections open now (a closed client's connections leave shortly after)."""
        with self._lock:
            return len(self._connections)

    @property
    def connections_opened(self) -> int:
        """Client connections accepted since the start."""
        with self._lock:
            return self._connection_count

    @property
    def pending(self) -> int:
        """Queued responses not served yet."""
        with self._lock:
            return len(self._queue)

    def wait_for_requests(self, count: int, timeout: float) -> list[RecordedRequest]:
        """Block until ``count`` requests arrived (from async code: ``asyncio.to_thread``).

        Raises:
            TimeoutError: Fewer requests arrived within ``timeout`` seconds.
        """
        with self._received_one:
            if not self._received_one.wait_for(lambda: len(self._requests) >= count, timeout):
                raise TimeoutError(f"{len(self._requests)} requests arrived, not {count}")
            return list(self._requests)

    def enqueue(self, *responses: FakeResponse) -> None:
        """Queue answers for the next requests."""
        with self._lock:
            self._queue.extend(responses)

    def start(self) -> Self:
        """Start serving; returns the server."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, end paused and hanging answers, close connections; idempotent."""
        if self._stopping.is_set():
            return
        with self._lock:
            self._stopping.set()
            waiting = list(self._waiting)
        for event in waiting:
            event.set()  # wake paused handlers; they see _stopping and drop their connection
        if self._thread.is_alive():
            self._server.shutdown()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):  # closed by its handler meanwhile
                connection.shutdown(socket.SHUT_RDWR)  # ends idle keep-alive reads
        self._server.server_close()  # joins the handler threads
        if self._thread.is_alive():
            self._thread.join()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)

    def _received(self, request: RecordedRequest) -> FakeResponse:
        with self._lock:
            self._requests.append(request)
            if self._keep_requests is not None and len(self._requests) > self._keep_requests:
                del self._requests[: len(self._requests) - self._keep_requests]
            self._received_one.notify_all()
            if self._queue:
                return self._queue.pop(0)
        if self._default is not None:
            return self._default(request)
        return FakeResponse.json_body(
            {"error": {"message": "FakeModelServer has no response queued", "type": "fake_server_error"}},
            status=500,
        )

    def _track(self, connection: socket.socket, *, open_: bool) -> int:
        with self._lock:
            if open_:
                self._connections.add(connection)
                self._connection_count += 1
            else:
                self._connections.discard(connection)
            return self._connection_count

    def _wait(self, event: threading.Event) -> bool:
        """Wait for ``event``; False when the server stops first."""
        with self._lock:
            if self._stopping.is_set():
                return False
            self._waiting.add(event)
        try:
            event.wait()
        finally:
            with self._lock:
                self._waiting.discard(event)
        return not self._stopping.is_set()
