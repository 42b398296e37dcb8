"""The server-sent events decoder: framing, line endings, comments, and pieces cut anywhere."""

from __future__ import annotations

import pytest

from agentrt.server.models._sse import ServerSentEvent, SSEDecoder

STREAM = (
    ": connected\r\n"
    "\r\n"
    "event: message_start\r\n"
    'data: {"type":"message_start"}\r\n'
    "\r\n"
    "data: first line\n"
    "data:second line, no space\n"
    "id: 7\n"
    "\n"
    "event: delta\r"
    "data: Ça coûte 5 € 📦\r"
    "\r"
    "retry: 1500\n"
    "data\n"
    "\n"
    "data: [DONE]\n"
    "\n"
).encode()

EXPECTED = [
    ServerSentEvent(event="message_start", data='{"type":"message_start"}'),
    ServerSentEvent(event="message", data="first line\nsecond line, no space", id="7"),
    ServerSentEvent(event="delta", data="Ça coûte 5 € 📦", id="7"),
    ServerSentEvent(event="message", data="", id="7", retry=1500),
    ServerSentEvent(event="message", data="[DONE]", id="7"),
]


def decode(*pieces: bytes) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    events = [event for piece in pieces for event in decoder.feed(piece)]
    assert not decoder.pending
    assert decoder.received == sum(len(piece) for piece in pieces)
    return events


def test_whole_stream_in_one_piece() -> None:
    assert decode(STREAM) == EXPECTED


@pytest.mark.parametrize("cut", range(1, len(STREAM)))
def test_any_single_cut_gives_the_same_events(cut: int) -> None:
    # Every offset: in the middle of lines, of CRLFs, and of the multibyte characters.
    assert decode(STREAM[:cut], STREAM[cut:]) == EXPECTED


def test_one_byte_at_a_time() -> None:
    assert decode(*(STREAM[i : i + 1] for i in range(len(STREAM)))) == EXPECTED


def test_events_are_dispatched_as_soon_as_their_blank_line_arrives() -> None:
    decoder = SSEDecoder()

    assert decoder.feed(b"data: one\n") == []
    assert decoder.pending
    assert decoder.feed(b"\ndata: tw") == [ServerSentEvent(event="message", data="one")]
    assert decoder.feed(b"o\n\ndata: three\n\n") == [
        ServerSentEvent(event="message", data="two"),
        ServerSentEvent(event="message", data="three"),
    ]
    assert not decoder.pending


def test_a_trailing_cr_waits_for_the_next_piece() -> None:
    decoder = SSEDecoder()

    # "data: x\r" then "\n": one CRLF, not CR + LF (which would dispatch an empty line too early).
    assert decoder.feed(b"data: x\r") == []
    assert decoder.feed(b"\ndata: y\r") == []
    assert decoder.feed(b"\n\r\n") == [ServerSentEvent(event="message", data="x\ny")]


def test_comments_unknown_fields_and_empty_events_are_skipped() -> None:
    stream = b": keep-alive\n\n:\n\nfoo: bar\nevent: ping\n\nid: 3\n\ndata: ok\n\n"

    assert decode(stream) == [ServerSentEvent(event="message", data="ok", id="3")]


def test_leading_bom_is_dropped_and_a_field_value_keeps_later_spaces() -> None:
    assert decode("\ufeffdata:  two spaces\n\n".encode()) == [
        ServerSentEvent(event="message", data=" two spaces")
    ]


def test_id_with_nul_is_ignored_and_bad_retry_too() -> None:
    assert decode(b"id: a\0b\nretry: soon\ndata: x\n\n") == [ServerSentEvent(event="message", data="x")]


def test_invalid_utf8_is_replaced_not_raised() -> None:
    assert decode(b"data: \xff\xfe ok\n\n") == [ServerSentEvent(event="message", data="\ufffd\ufffd ok")]


@pytest.mark.parametrize("tail", [b'data: {"partial', b"data: done\n", b"event: x\n"])
def test_an_unfinished_event_stays_pending(tail: bytes) -> None:
    decoder = SSEDecoder()

    assert decoder.feed(b"data: one\n\n" + tail) == [ServerSentEvent(event="message", data="one")]
    assert decoder.pending
