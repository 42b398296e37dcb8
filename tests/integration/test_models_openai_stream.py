"""The ``openai`` provider streaming over real HTTP from the fake model server, with recorded exchanges."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentrt.server.models import (
    Message,
    ModelAuthError,
    ModelError,
    ModelPermanentError,
    ModelRequest,
    ModelResponse,
    ModelSpecData,
    ModelToolCall,
    ModelTransientError,
    OpenAIProvider,
    ToolDef,
)
from agentrt.testing import Exchange, FakeModelServer, FakeResponse, sse_event

FIXTURES = Path(__file__).parents[1] / "fixtures" / "models"
KEY_ENV = "AGENTRT_FAKE_OPENAI_KEY"
KEY = "sk-fake-stream-0123456789abcdef"
SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string", "description": "Order id, e.g. A100"}},
    "required": ["order_id"],
    "additionalProperties": False,
}
LOOKUP = ToolDef(name="orders.lookup", description="Look up an order by id.", input_schema=SCHEMA)
SPEC = ModelSpecData(provider="openai", name="gpt-4o-mini", options={})
HISTORY = (
    Message(role="system", content="You are a support agent. Answer briefly."),
    Message(role="user", content="Where are orders A100 and B200?"),
)
CALLS = (
    ModelToolCall(
        call_id="call_qJ3vXn0fL8mA2cR9", tool="orders.lookup", arguments_json='{"order_id":"A100"}'
    ),
    ModelToolCall(
        call_id="call_W7tYb1eKp4sD6hZ0", tool="orders.lookup", arguments_json='{"order_id":"B200"}'
    ),
)
AFTER_TOOLS = (
    *HISTORY,
    Message(role="assistant", tool_calls=CALLS),
    Message(role="tool", tool_call_id=CALLS[0].call_id, content='{"status":"shipped","carrier":"UPS"}'),
    Message(role="tool", tool_call_id=CALLS[1].call_id, content='{"status":"packed"}'),
)
TEXT_FRAGMENTS = [
    "Order",
    " A100",
    " shipped",
    " yesterday",
    " with UPS",
    ";",
    " B200",
    " is",
    " packed",
    ".",
]


def load(name: str) -> Exchange:
    return Exchange.load(FIXTURES / f"{name}.json")


def make_request(messages: tuple[Message, ...] = HISTORY, *, timeout_s: float | None = 10) -> ModelRequest:
    return ModelRequest(
        run_id="run-1", step=1, spec=SPEC, messages=messages, tools=(LOOKUP,), timeout_s=timeout_s
    )


def ids_of(response: ModelResponse | ModelError) -> tuple[str, str]:
    assert isinstance(response, ModelResponse)
    return response.response_id, response.request_id


def without_ids(response: ModelResponse | ModelError) -> ModelResponse:
    """The response with its provider ids left out (the fixtures are real answers: their ids vary)."""
    assert isinstance(response, ModelResponse)
    return dataclasses.replace(response, response_id="", request_id="")


@pytest.fixture
async def server() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer() as fake:
        yield fake


def make_provider(server: FakeModelServer, **options: Any) -> OpenAIProvider:
    return OpenAIProvider(
        options={"base_url": server.url + "/v1", "api_key_env": KEY_ENV, **options}, environ={KEY_ENV: KEY}
    )


@pytest.fixture
async def provider(server: FakeModelServer) -> AsyncIterator[OpenAIProvider]:
    made = make_provider(server)
    try:
        yield made
    finally:
        await made.aclose()


async def stream(
    provider: OpenAIProvider, request: ModelRequest | None = None
) -> tuple[ModelResponse | ModelError, list[str]]:
    deltas: list[str] = []
    try:
        return await provider.complete(request or make_request(), on_text_delta=deltas.append), deltas
    except ModelError as exc:
        return exc, deltas


def assert_sent(server: FakeModelServer, exchange: Exchange) -> None:
    (received,) = server.requests
    assert exchange.mismatches(received) == []
    assert received.headers["authorization"] == f"Bearer {KEY}"


async def test_streamed_answer_after_tool_results(server: FakeModelServer, provider: OpenAIProvider) -> None:
    exchange = load("openai_stream_text")
    server.enqueue(exchange.response)

    response, deltas = await stream(provider, make_request(AFTER_TOOLS))

    assert deltas == TEXT_FRAGMENTS
    assert ids_of(response)[0].startswith("chatcmpl-")  # the provider's ids, kept for the record
    assert without_ids(response) == ModelResponse(
        text="Order A100 shipped yesterday with UPS; B200 is packed.",
        tool_calls=(),
        input_tokens=118,  # from the usage chunk
        output_tokens=14,
        finish_reason="stop",
    )
    assert_sent(server, exchange)  # roles, tool_call_id, stream + include_usage
    assert server.pending == 0


async def test_tool_call_argument_fragments_across_pieces(
    server: FakeModelServer, provider: OpenAIProvider
) -> None:
    exchange = load("openai_stream_tool_calls")
    server.enqueue(exchange.response)

    response, deltas = await stream(provider)

    assert ids_of(response)[0].startswith("chatcmpl-")  # the provider's ids, kept for the record
    assert without_ids(response) == ModelResponse(
        text="", tool_calls=CALLS, input_tokens=96, output_tokens=50, finish_reason="tool_calls"
    )
    assert deltas == []
    assert_sent(server, exchange)


async def test_pieces_cut_inside_utf8_characters(server: FakeModelServer, provider: OpenAIProvider) -> None:
    exchange = load("openai_stream_split_utf8")
    body, cuts = exchange.response.body, exchange.response.chunks
    for cut in cuts:  # the fixture does cut inside characters
        with pytest.raises(UnicodeDecodeError):
            body[:cut].decode()
    server.enqueue(exchange.response)

    response, deltas = await stream(provider)

    assert isinstance(response, ModelResponse)
    assert response.text == "Ça arrive demain — colis 📦 prêt ☕"
    assert deltas == ["Ça", " arrive", " demain", " — ", "colis", " 📦", " prêt", " ☕"]
    assert (response.input_tokens, response.output_tokens) == (61, 11)


async def test_crlf_comments_and_keep_alives(server: FakeModelServer, provider: OpenAIProvider) -> None:
    exchange = load("openai_stream_crlf_keepalive")
    body = exchange.response.body
    assert any(body[cut - 1 : cut + 1] == b"\r\n" for cut in exchange.response.chunks)  # a cut inside CRLF
    server.enqueue(exchange.response)

    response, deltas = await stream(provider)

    assert deltas == ["Both", " orders", " are on their way."]
    assert ids_of(response)[0].startswith("chatcmpl-")  # the provider's ids, kept for the record
    assert without_ids(response) == ModelResponse(
        text="Both orders are on their way.",
        tool_calls=(),
        input_tokens=58,
        output_tokens=6,
        finish_reason="stop",
    )


async def test_streams_reuse_the_kept_alive_connection(
    server: FakeModelServer, provider: OpenAIProvider
) -> None:
    server.enqueue(load("openai_stream_text").response, load("openai_stream_tool_calls").response)

    first, _ = await stream(provider, make_request(AFTER_TOOLS))
    second, _ = await stream(provider)

    assert isinstance(first, ModelResponse) and isinstance(second, ModelResponse)
    assert [received.connection for received in server.requests] == [1, 1]


async def test_a_body_left_open_after_done_does_not_hold_the_call(
    server: FakeModelServer, provider: OpenAIProvider
) -> None:
    answer = load("openai_stream_text").response
    answer = answer.with_pause(len(answer.body))  # everything but the end of the chunked body
    server.enqueue(answer, load("openai_stream_text").response)

    response, deltas = await stream(provider, make_request(AFTER_TOOLS, timeout_s=5))
    again, _ = await stream(provider, make_request(AFTER_TOOLS))

    assert isinstance(response, ModelResponse) and deltas == TEXT_FRAGMENTS
    assert answer.paused.is_set() and not answer.finished.is_set()
    assert isinstance(again, ModelResponse)
    assert [received.connection for received in server.requests] == [1, 2]  # the open one was given up


async def test_first_delta_arrives_before_the_answer_finishes(
    server: FakeModelServer, provider: OpenAIProvider
) -> None:
    answer = load("openai_stream_text").response
    answer = answer.with_pause(answer.event_ends()[1])  # after the role chunk and "Order"
    server.enqueue(answer)
    first = asyncio.Event()
    deltas: list[str] = []

    def on_text_delta(fragment: str) -> None:
        deltas.append(fragment)
        first.set()

    call = asyncio.create_task(provider.complete(make_request(AFTER_TOOLS), on_text_delta=on_text_delta))
    await asyncio.wait_for(first.wait(), timeout=5)

    assert deltas == ["Order"]
    assert not call.done() and not answer.finished.is_set()  # the server is still holding the rest
    answer.gate.set()
    response = await asyncio.wait_for(call, timeout=5)
    assert response.text == "".join(TEXT_FRAGMENTS) == "".join(deltas)
    # The server thread marks the answer finished just after writing its last bytes, which the
    # client may already have read: wait for the mark, with a bound.
    assert await asyncio.to_thread(answer.finished.wait, 5)


@pytest.mark.parametrize("drop", ["close", "reset"])
async def test_disconnect_mid_stream_is_stream_interrupted(
    server: FakeModelServer, provider: OpenAIProvider, drop: str
) -> None:
    exchange = load("openai_stream_text")
    ends = exchange.response.event_ends()
    server.enqueue(exchange.response.with_drop(ends[3] + 20, drop))  # 20 bytes into the 5th event
    server.enqueue(load("openai_stream_text").response)

    error, deltas = await stream(provider, make_request(AFTER_TOOLS))
    retried, again = await stream(provider, make_request(AFTER_TOOLS))

    assert isinstance(error, ModelTransientError)
    assert error.reason == "stream_interrupted" and error.retryable
    assert "broke off after" in error.message and KEY not in error.message
    assert deltas == TEXT_FRAGMENTS[:3]  # what the broken attempt showed; the engine drops it
    assert isinstance(retried, ModelResponse) and again == TEXT_FRAGMENTS  # a retry on a new connection


async def test_stream_that_ends_without_done_is_stream_interrupted(
    server: FakeModelServer, provider: OpenAIProvider
) -> None:
    server.enqueue(load("openai_stream_no_done").response)

    error, deltas = await stream(provider)

    assert isinstance(error, ModelTransientError)
    assert error.reason == "stream_interrupted"
    assert "before its final event" in error.message
    assert deltas == ["Order", " A100", " shi"]


async def test_stream_cut_in_the_middle_of_an_event_is_stream_interrupted(
    server: FakeModelServer, provider: OpenAIProvider
) -> None:
    answer = load("openai_stream_text").response
    cut = answer.event_ends()[2] + 30
    server.enqueue(dataclasses.replace(answer, body=answer.body[:cut], chunks=()))  # a clean end, mid-event

    error, deltas = await stream(provider, make_request(AFTER_TOOLS))

    assert isinstance(error, ModelTransientError) and error.reason == "stream_interrupted"
    assert "in the middle of an event" in error.message
    assert deltas == ["Order", " A100"]


async def test_timeout_while_the_stream_stalls(server: FakeModelServer, provider: OpenAIProvider) -> None:
    answer = load("openai_stream_text").response
    answer = answer.with_pause(answer.event_ends()[1])  # never released: the server stops it at teardown
    server.enqueue(answer)

    error, deltas = await stream(provider, make_request(AFTER_TOOLS, timeout_s=0.3))

    assert isinstance(error, ModelTransientError)
    assert (error.reason, error.message) == ("timeout", "model call timed out after 0.3s")
    assert deltas == ["Order"]


async def test_error_chunk_inside_the_stream(server: FakeModelServer, provider: OpenAIProvider) -> None:
    server.enqueue(
        FakeResponse.event_stream(
            sse_event({"choices": [{"index": 0, "delta": {"content": "Order"}, "finish_reason": None}]}),
            sse_event(
                {
                    "error": {
                        "message": "The server had an error processing your request.",
                        "type": "server_error",
                    }
                }
            ),
        )
    )

    error, deltas = await stream(provider)

    assert isinstance(error, ModelTransientError)
    assert (error.reason, deltas) == ("server_error", ["Order"])


@pytest.mark.parametrize(
    ("name", "kind", "reason", "status", "retry_after_s", "text"),
    [
        ("openai_error_429", ModelTransientError, "rate_limited", 429, 20.0, "Rate limit reached"),
        ("openai_error_500", ModelTransientError, "server_error", 500, None, "The server had an error"),
        (
            "openai_error_context_length",
            ModelPermanentError,
            "context_length_exceeded",
            400,
            None,
            "128000 tokens",
        ),
        (
            "openai_error_401",
            ModelAuthError,
            "unauthorized",
            401,
            None,
            "Incorrect API key provided: sk-***.",
        ),
    ],
)
async def test_error_answers_to_a_streaming_request(
    server: FakeModelServer,
    provider: OpenAIProvider,
    name: str,
    kind: type[ModelError],
    reason: str,
    status: int,
    retry_after_s: float | None,
    text: str,
) -> None:
    exchange = load(name)
    server.enqueue(exchange.response)

    error, deltas = await stream(provider)

    assert type(error) is kind
    assert (error.reason, error.status_code, error.retry_after_s) == (reason, status, retry_after_s)
    assert text in error.message and KEY not in str(error)
    assert deltas == []
    assert exchange.mismatches(server.requests[0]) == []


async def test_529_is_transient_overloaded(server: FakeModelServer, provider: OpenAIProvider) -> None:
    server.enqueue(
        FakeResponse.json_body(
            {"error": {"message": "Overloaded", "type": "server_error", "param": None, "code": None}},
            status=529,
            headers={"retry-after-ms": "1500"},
        )
    )

    error, _ = await stream(provider)

    assert isinstance(error, ModelTransientError)
    assert (error.reason, error.status_code, error.retry_after_s) == ("overloaded", 529, 1.5)


async def test_stream_option_false_waits_for_the_whole_answer(server: FakeModelServer) -> None:
    server.enqueue(
        FakeResponse.json_body(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "Shipped."},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11},
            }
        )
    )
    provider = make_provider(server, stream=False)
    try:
        response, deltas = await stream(provider)
    finally:
        await provider.aclose()

    assert isinstance(response, ModelResponse) and deltas == ["Shipped."]
    assert "stream" not in server.requests[0].json()


async def test_a_stream_request_answered_with_html_is_a_bad_response(
    server: FakeModelServer, provider: OpenAIProvider
) -> None:
    server.enqueue(
        FakeResponse(headers=(("Content-Type", "text/html"),), body=b"<html>captive portal</html>")
    )

    error, _ = await stream(provider)

    assert isinstance(error, ModelPermanentError)
    assert (error.reason, error.status_code) == ("bad_response", 200)
    assert "text/html" in error.message


async def test_concurrent_streams_on_one_provider(server: FakeModelServer, provider: OpenAIProvider) -> None:
    server.enqueue(load("openai_stream_text").response, load("openai_stream_text").response)

    results = await asyncio.gather(
        stream(provider, make_request(AFTER_TOOLS)), stream(provider, make_request(AFTER_TOOLS))
    )

    assert [deltas for _, deltas in results] == [TEXT_FRAGMENTS, TEXT_FRAGMENTS]


async def test_the_key_never_reaches_logs_or_errors(
    server: FakeModelServer, provider: OpenAIProvider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    answer = load("openai_stream_text").response
    server.enqueue(load("openai_error_401").response, answer.with_drop(answer.event_ends()[2], "reset"))

    errors = [(await stream(provider))[0], (await stream(provider, make_request(AFTER_TOOLS)))[0]]

    assert [type(error) for error in errors] == [ModelAuthError, ModelTransientError]
    assert "chat completion run_id=run-1" in caplog.text  # debug logging was on
    assert KEY not in caplog.text
    assert all(KEY not in str(error) and KEY not in repr(error) for error in errors)
    assert KEY not in repr(provider)
