"""Incremental decoder of server-sent events (the WHATWG ``text/event-stream`` format).

Pure: bytes go in as they arrive from the network, in pieces of any size, and complete events come
out. Lines end with CRLF, LF or CR; a CR at the end of a piece waits for the next one, since it may
be the first half of a CRLF. Lines are decoded only once complete, so a UTF-8 character cut between
two pieces is never decoded in halves (its bytes cannot contain CR or LF).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["SSEDecoder", "ServerSentEvent"]

_LINE_END = re.compile(rb"\r\n|\r|\n")
_BOM = "\ufeff"


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSentEvent:
    """One dispatched event.

    Attributes:
        event: Event type from the ``event:`` field; ``message`` when the event has none.
        data: The ``data:`` lines joined with newlines.
        id: Last event id seen so far, if any.
        retry: Reconnection time in milliseconds, when the event set one.
    """

    event: str
    data: str
    id: str | None = None
    retry: int | None = None


class SSEDecoder:
    """Turns pieces of an event stream into events; one instance per stream."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._started = False
        self._event = ""
        self._data: list[str] = []
        self._last_id: str | None = None
        self._retry: int | None = None
        self._received = 0

    @property
    def received(self) -> int:
        """Bytes fed so far."""
        return self._received

    @property
    def pending(self) -> bool:
        """Whether an incomplete line or event is buffered (the stream so far ends mid-event)."""
        return bool(self._buffer) or bool(self._data) or bool(self._event)

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Add the next piece of the stream.

        Args:
            chunk: Bytes as received; may cut lines, events and UTF-8 characters anywhere.

        Returns:
            The events completed by this piece, in order.
        """
        self._received += len(chunk)
        self._buffer += chunk
        events: list[ServerSentEvent] = []
        start = 0
        for match in _LINE_END.finditer(self._buffer):
            if match.group() == b"\r" and match.end() == len(self._buffer):
                break  # maybe half of a CRLF: decide when the next piece comes
            event = self._line(bytes(self._buffer[start : match.start()]))
            if event is not None:
                events.append(event)
            start = match.end()
        del self._buffer[:start]
        return events

    def _line(self, raw: bytes) -> ServerSentEvent | None:
        line = raw.decode("utf-8", "replace")
        if not self._started:
            self._started = True
            line = line.removeprefix(_BOM)
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment; servers send them as keep-alives
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        match name:
            case "data":
                self._data.append(value)
            case "event":
                self._event = value
            case "id":
                if "\0" not in value:
                    self._last_id = value
            case "retry":
                if value.isascii() and value.isdigit():
                    self._retry = int(value)
            case _:
                pass  # unknown fields are ignored, as the format says
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        data, event, retry = self._data, self._event, self._retry
        self._data, self._event, self._retry = [], "", None
        if not data:
            return None  # an event without data is not dispatched
        return ServerSentEvent(event=event or "message", data="\n".join(data), id=self._last_id, retry=retry)
