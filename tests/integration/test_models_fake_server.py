"""The fake model server and the recorded exchanges of agentrt.testing, over real HTTP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from agentrt.server.models._sse import SSEDecoder
from agentrt.testing import (
    Exchange,
    ExpectedRequest,
    FakeModelServer,
    FakeResponse,
    RecordedRequest,
    sse_event,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "models"
EVENTS = (sse_event({"n": 1}), sse_event({"n": 2}, event="delta"), sse_event("[DONE]"))


@pytest.fixture
async def server() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer() as fake:
        yield fake


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=5) as made:
        yield made


def test_sse_event_encoding() -> None:
    assert sse_event({"a": "é"}) == 'data: {"a":"é"}\n\n'.encode()
    assert sse_event("line 1\nline 2", event="note") == b"event: note\ndata: line 1\ndata: line 2\n\n"


def test_event_stream_offsets() -> None:
    response = FakeResponse.event_stream(*EVENTS, pause_after=1, drop_after=2)
    ends = [len(EVENTS[0]), len(EVENTS[0]) + len(EVENTS[1]), len(b"".join(EVENTS))]

    assert response.body == b"".join(EVENTS)
    assert response.event_ends() == ends
    assert (response.chunks, response.pause_at, response.drop_at) == (tuple(ends[:2]), ends[0], ends[1])
    assert response.is_chunked and not FakeResponse.json_body({}).is_chunked
    assert FakeResponse.event_stream(*EVENTS, pause_after=0).pause_at == 0


async def test_requests_are_recorded_and_answered_in_order(
    server: FakeModelServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(FakeResponse.json_body({"n": 1}, status=201, headers={"X-Extra": "yes"}))

    first = await client.post(server.url + "/v1/things?x=1", json={"q": "é"}, headers={"X-Test": "A"})
    second = await client.post(server.url + "/v1/more", content=b"")

    assert (first.status_code, first.json(), first.headers["x-extra"]) == (201, {"n": 1}, "yes")
    assert second.status_code == 500
    assert second.json()["error"]["message"] == "FakeModelServer has no response queued"
    recorded = server.requests
    assert [(r.method, r.path) for r in recorded] == [("POST", "/v1/things?x=1"), ("POST", "/v1/more")]
    assert recorded[0].json() == {"q": "é"} and recorded[0].headers["x-test"] == "A"
    assert recorded[1].body == b""
    assert [r.connection for r in recorded] == [1, 1]  # kept alive
    assert server.pending == 0


async def test_nothing_after_the_pause_point_is_sent_before_the_gate_opens(
    server: FakeModelServer, client: httpx.AsyncClient
) -> None:
    response = FakeResponse.event_stream(*EVENTS, pause_after=1)
    server.enqueue(response)
    received = bytearray()

    async with client.stream("POST", server.url + "/s", json={}) as answer:
        chunks = answer.aiter_raw()
        while len(received) < len(EVENTS[0]):
            received += await asyncio.wait_for(anext(chunks), timeout=5)
        assert bytes(received) == EVENTS[0]
        assert await asyncio.to_thread(response.paused.wait, 5)
        assert not response.finished.is_set()
        response.gate.set()
        async for chunk in chunks:
            received += chunk

    assert bytes(received) == response.body
    # Marked just after the last bytes are written, which the client may have read already.
    assert await asyncio.to_thread(response.finished.wait, 5)


async def test_headers_arrive_before_a_pause_at_offset_zero(
    server: FakeModelServer, client: httpx.AsyncClient
) -> None:
    response = FakeResponse.event_stream(*EVENTS, pause_after=0, status=202)
    server.enqueue(response)

    async with client.stream("POST", server.url + "/s", json={}) as answer:
        assert answer.status_code == 202 and answer.headers["content-type"].startswith("text/event-stream")
        assert not response.finished.is_set()
        response.gate.set()
        assert await answer.aread() == response.body


@pytest.mark.parametrize(
    ("response", "error"),
    [
        (FakeResponse.event_stream(*EVENTS, drop_after=1), httpx.RemoteProtocolError),
        (FakeResponse.event_stream(*EVENTS, drop_after=1, drop="reset"), httpx.ReadError),
        (FakeResponse.json_body({"long": "x" * 100}).with_drop(20), httpx.RemoteProtocolError),
    ],
)
async def test_dropped_connections(
    server: FakeModelServer, client: httpx.AsyncClient, response: FakeResponse, error: type[Exception]
) -> None:
    server.enqueue(response)
    received = bytearray()

    with pytest.raises(error):
        async with client.stream("POST", server.url + "/s", json={}) as answer:
            async for chunk in answer.aiter_raw():
                received += chunk

    assert bytes(received) == response.body[: response.drop_at]
    assert not response.finished.is_set()


def test_waiting_for_requests_times_out() -> None:
    with FakeModelServer() as server, pytest.raises(TimeoutError, match="0 requests arrived, not 1"):
        server.wait_for_requests(1, 0.01)


async def test_stop_ends_hanging_and_paused_answers_and_idle_connections(client: httpx.AsyncClient) -> None:
    server = FakeModelServer().start()
    paused = FakeResponse.event_stream(*EVENTS, pause_after=1)
    server.enqueue(FakeResponse.json_body({}), FakeResponse(hang=True), paused)
    async with httpx.AsyncClient(timeout=5) as idle:
        assert (await idle.post(server.url + "/warm", json={})).status_code == 200
        hanging = asyncio.create_task(client.post(server.url + "/hang", json={}))
        await asyncio.to_thread(server.wait_for_requests, 2, 5)
        async with client.stream("POST", server.url + "/paused", json={}) as answer:
            assert await asyncio.to_thread(paused.paused.wait, 5)
            # The idle keep-alive connection is still open: stop() must not wait for it.
            await asyncio.wait_for(asyncio.to_thread(server.stop), timeout=5)
            with pytest.raises(httpx.RemoteProtocolError):
                await answer.aread()
        with pytest.raises(httpx.RemoteProtocolError):
            await hanging

    server.stop()  # idempotent
    assert server.pending == 0


def test_exchange_fixture_files_load(tmp_path: Path) -> None:
    path = tmp_path / "demo.json"
    path.write_text(
        json.dumps(
            {
                "description": "demo",
                "request": {"path": "/v1/x", "headers": {"X-A": "1"}, "json": {"a": [1, {"b": 2}], "c": 3}},
                "response": {
                    "status": 201,
                    "headers": {"content-type": "text/event-stream"},
                    "body": ["ab", "cd"],
                    "chunks": [1, 3],
                },
            }
        )
    )

    exchange = Exchange.load(path)

    assert exchange.name == "demo" and exchange.description == "demo"
    assert exchange.request == ExpectedRequest(
        path="/v1/x", headers={"X-A": "1"}, json={"a": [1, {"b": 2}], "c": 3}
    )
    response = exchange.response
    assert (response.status, response.body, response.chunks, response.is_chunked) == (
        201,
        b"abcd",
        (1, 3),
        True,
    )
    good = RecordedRequest(
        method="POST", path="/v1/x", headers={"x-a": "1"}, body=b'{"c": 3, "a": [1, {"b": 2}]}'
    )
    assert exchange.mismatches(good) == []
    bad = RecordedRequest(method="GET", path="/v1/y", headers={}, body=b'{"a": [1, {"b": 3}], "d": 4}')
    assert exchange.mismatches(bad) == [
        "request line GET /v1/y, expected POST /v1/x",
        "header X-A: None, expected '1'",
        "body.a[1].b is 3, expected 2",
        "body.c is missing",
        "body.d is unexpected",
    ]


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ({"response": {}}, "not a model exchange fixture"),
        (
            {"request": {"path": "/x"}, "response": {"body": "abc", "chunks": [3]}},
            "chunk offsets must fall inside",
        ),
        (
            {"request": {"path": "/x"}, "response": {"body": "abc", "chunks": [0]}},
            "chunk offsets must fall inside",
        ),
    ],
)
def test_malformed_fixtures_are_refused(tmp_path: Path, content: object, match: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(content))

    with pytest.raises(ValueError, match=match):
        Exchange.load(path)


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.json")), ids=lambda path: path.stem)
def test_every_recorded_exchange_is_well_formed(path: Path) -> None:
    exchange = Exchange.load(path)
    response = exchange.response

    assert exchange.description and exchange.request.path in ("/v1/chat/completions", "/v1/messages")
    assert list(response.chunks) == sorted(set(response.chunks))
    if not response.is_chunked:
        json.loads(response.body)
        return
    decoder = SSEDecoder()
    start = 0
    events = []
    for end in [*response.chunks, len(response.body)]:
        events += decoder.feed(response.body[start:end])
        start = end
    assert not decoder.pending
    last = events[-1].data
    final = last == "[DONE]" or json.loads(last).get("type") in ("message_stop", "error")
    assert final == (exchange.name != "openai_stream_no_done")
    for event in events:
        if event.data != "[DONE]":
            json.loads(event.data)


async def test_a_default_answers_when_nothing_is_queued_and_connections_are_counted() -> None:
    def answer(request: RecordedRequest) -> FakeResponse:
        return FakeResponse.json_body({"path": request.path})

    async with FakeModelServer(
        FakeResponse.json_body({"queued": True}), default=answer, keep_requests=2
    ) as fake:
        async with httpx.AsyncClient(timeout=5) as first:
            assert (await first.post(f"{fake.url}/a")).json() == {"queued": True}
            assert (await first.post(f"{fake.url}/b")).json() == {"path": "/b"}
            async with httpx.AsyncClient(timeout=5) as second:
                assert (await second.post(f"{fake.url}/c")).json() == {"path": "/c"}
                assert (fake.open_connections, fake.connections_opened) == (2, 2)
        for _ in range(200):  # the server sees the clients' closes shortly after
            if fake.open_connections == 0:
                break
            await asyncio.sleep(0.01)

        assert fake.open_connections == 0
        assert [r.path for r in fake.requests] == ["/b", "/c"]  # only the last keep_requests
