"""The ``anthropic`` provider over real HTTP from the fake model server, with recorded exchanges."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentrt.server.models import (
    AnthropicProvider,
    Message,
    ModelAuthError,
    ModelError,
    ModelPermanentError,
    ModelRegistry,
    ModelRequest,
    ModelResponse,
    ModelSpecData,
    ModelToolCall,
    ModelTransientError,
    ToolDef,
    get_model_plugin_manager,
)
from agentrt.testing import Exchange, FakeModelServer, FakeResponse

FIXTURES = Path(__file__).parents[1] / "fixtures" / "models"
KEY_ENV = "AGENTRT_FAKE_ANTHROPIC_KEY"
KEY = "sk-ant-api03-fake-integration-0123456789"
SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string", "description": "Order id, e.g. A100"}},
    "required": ["order_id"],
    "additionalProperties": False,
}
LOOKUP = ToolDef(name="orders.lookup", description="Look up an order by id.", input_schema=SCHEMA)
SPEC = ModelSpecData(provider="anthropic", name="claude-sonnet-4-20250514", options={})
HISTORY = (
    Message(role="system", content="You are a support agent. Answer briefly."),
    Message(role="user", content="Where are orders A100 and B200?"),
)
CALLS = (
    ModelToolCall(
        call_id="toolu_01D7FLrfh4GYq7yT1ULFeyMV", tool="orders.lookup", arguments_json='{"order_id":"A100"}'
    ),
    ModelToolCall(
        call_id="toolu_01RaVcYyAVEpeK2F1Lz3mJNq", tool="orders.lookup", arguments_json='{"order_id":"B200"}'
    ),
)
AFTER_TOOLS = (
    *HISTORY,
    Message(role="assistant", content="I'll look up both orders.", tool_calls=CALLS),
    Message(role="tool", tool_call_id=CALLS[0].call_id, content='{"status":"shipped","carrier":"UPS"}'),
    Message(role="tool", tool_call_id=CALLS[1].call_id, content='{"status":"packed"}'),
)
FINAL_FRAGMENTS = ["Order A100 shipped", " with UPS; B200 is", " packed — arriving", " soon 📦."]


def load(name: str) -> Exchange:
    return Exchange.load(FIXTURES / f"{name}.json")


def make_request(messages: tuple[Message, ...] = HISTORY, *, timeout_s: float | None = 10) -> ModelRequest:
    return ModelRequest(
        run_id="run-7", step=1, spec=SPEC, messages=messages, tools=(LOOKUP,), timeout_s=timeout_s
    )


def make_provider(server: FakeModelServer, **options: Any) -> AnthropicProvider:
    return AnthropicProvider(
        options={"base_url": server.url, "api_key_env": KEY_ENV, **options}, environ={KEY_ENV: KEY}
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


@pytest.fixture
async def provider(server: FakeModelServer) -> AsyncIterator[AnthropicProvider]:
    made = make_provider(server)
    try:
        yield made
    finally:
        await made.aclose()


async def stream(
    provider: AnthropicProvider, request: ModelRequest | None = None
) -> tuple[ModelResponse | ModelError, list[str]]:
    deltas: list[str] = []
    try:
        return await provider.complete(request or make_request(), on_text_delta=deltas.append), deltas
    except ModelError as exc:
        return exc, deltas


def assert_sent(server: FakeModelServer, exchange: Exchange) -> None:
    (received,) = server.requests
    assert exchange.mismatches(received) == []
    assert received.headers["x-api-key"] == KEY
    assert "authorization" not in received.headers


async def test_streamed_text_and_tool_use_fragments(
    server: FakeModelServer, provider: AnthropicProvider
) -> None:
    exchange = load("anthropic_stream_tool_use")
    server.enqueue(exchange.response)

    response, deltas = await stream(provider)

    assert deltas == ["I'll", " look up", " both orders."]
    assert ids_of(response)[0].startswith("msg_")  # the provider's ids, kept for the record
    assert without_ids(response) == ModelResponse(
        text="I'll look up both orders.",
        tool_calls=(  # the input JSON exactly as the fragments spelled it
            dataclasses.replace(CALLS[0], arguments_json='{"order_id": "A100"}'),
            dataclasses.replace(CALLS[1], arguments_json='{"order_id": "B200"}'),
        ),
        input_tokens=512,
        output_tokens=98,
        finish_reason="tool_calls",
    )
    assert_sent(server, exchange)  # system on top, tools with input_schema, stream, max_tokens 1024


async def test_final_answer_after_merged_tool_results_with_utf8_cuts(
    server: FakeModelServer, provider: AnthropicProvider
) -> None:
    exchange = load("anthropic_stream_text")
    body = exchange.response.body
    assert sum(1 for cut in exchange.response.chunks if body[cut - 1] >= 0x80 and body[cut] >= 0x80) == 2
    server.enqueue(exchange.response)

    response, deltas = await stream(provider, make_request(AFTER_TOOLS))

    assert deltas == FINAL_FRAGMENTS
    assert ids_of(response)[0].startswith("msg_")  # the provider's ids, kept for the record
    assert without_ids(response) == ModelResponse(
        text="".join(FINAL_FRAGMENTS), tool_calls=(), input_tokens=689, output_tokens=21, finish_reason="stop"
    )
    assert_sent(server, exchange)  # tool_use blocks, one user message with both tool_result blocks


async def test_first_delta_arrives_before_the_answer_finishes(
    server: FakeModelServer, provider: AnthropicProvider
) -> None:
    answer = load("anthropic_stream_text").response
    answer = answer.with_pause(answer.event_ends()[3])  # message_start, block start, ping, first delta
    server.enqueue(answer)
    first = asyncio.Event()
    deltas: list[str] = []

    def on_text_delta(fragment: str) -> None:
        deltas.append(fragment)
        first.set()

    call = asyncio.create_task(provider.complete(make_request(AFTER_TOOLS), on_text_delta=on_text_delta))
    await asyncio.wait_for(first.wait(), timeout=5)

    assert deltas == FINAL_FRAGMENTS[:1]
    assert not call.done() and not answer.finished.is_set()
    answer.gate.set()
    response = await asyncio.wait_for(call, timeout=5)
    assert deltas == FINAL_FRAGMENTS and response.text == "".join(FINAL_FRAGMENTS)


async def test_overloaded_error_event_mid_stream(
    server: FakeModelServer, provider: AnthropicProvider
) -> None:
    server.enqueue(load("anthropic_stream_overloaded").response)

    error, deltas = await stream(provider)

    assert isinstance(error, ModelTransientError)
    assert (error.reason, error.status_code) == ("overloaded", None)
    assert error.message == "model stream reported overloaded_error: Overloaded"
    assert deltas == ["I'll look"]


@pytest.mark.parametrize("drop", ["close", "reset"])
async def test_disconnect_mid_stream_is_stream_interrupted(
    server: FakeModelServer, provider: AnthropicProvider, drop: str
) -> None:
    answer = load("anthropic_stream_tool_use").response
    server.enqueue(answer.with_drop(answer.event_ends()[8] + 10, drop))  # inside the 1st tool's input

    error, deltas = await stream(provider)

    assert isinstance(error, ModelTransientError)
    assert error.reason == "stream_interrupted"
    assert deltas == ["I'll", " look up", " both orders."]


async def test_stream_without_message_stop_is_stream_interrupted(
    server: FakeModelServer, provider: AnthropicProvider
) -> None:
    answer = load("anthropic_stream_text").response
    ends = answer.event_ends()
    server.enqueue(
        dataclasses.replace(answer, body=answer.body[: ends[-2]], chunks=())
    )  # all but message_stop

    error, deltas = await stream(provider, make_request(AFTER_TOOLS))

    assert isinstance(error, ModelTransientError) and error.reason == "stream_interrupted"
    assert "before its final event" in error.message
    assert deltas == FINAL_FRAGMENTS


async def test_timeout_while_the_stream_stalls(server: FakeModelServer, provider: AnthropicProvider) -> None:
    answer = load("anthropic_stream_text").response
    server.enqueue(answer.with_pause(answer.event_ends()[3]))

    error, deltas = await stream(provider, make_request(AFTER_TOOLS, timeout_s=0.3))

    assert isinstance(error, ModelTransientError) and error.reason == "timeout"
    assert deltas == FINAL_FRAGMENTS[:1]


async def test_without_a_delta_callback_the_call_does_not_stream(
    server: FakeModelServer, provider: AnthropicProvider
) -> None:
    exchange = load("anthropic_message_tool_use")
    server.enqueue(exchange.response)

    response = await provider.complete(make_request())

    assert ids_of(response)[0].startswith("msg_")  # the provider's ids, kept for the record
    assert without_ids(response) == ModelResponse(
        text="I'll look up both orders.",
        tool_calls=CALLS,
        input_tokens=512,  # 412 uncached + 100 read from the cache
        output_tokens=98,
        finish_reason="tool_calls",
    )
    assert_sent(server, exchange)


async def test_stream_option_false_sends_the_text_once(server: FakeModelServer) -> None:
    server.enqueue(load("anthropic_message_tool_use").response)
    provider = make_provider(server, stream=False, max_tokens=64, temperature=0)
    try:
        response, deltas = await stream(provider)
    finally:
        await provider.aclose()

    assert isinstance(response, ModelResponse) and deltas == ["I'll look up both orders."]
    sent = server.requests[0].json()
    assert "stream" not in sent and (sent["max_tokens"], sent["temperature"]) == (64, 0)


@pytest.mark.parametrize(
    ("name", "kind", "reason", "status", "retry_after_s", "text"),
    [
        ("anthropic_error_429", ModelTransientError, "rate_limited", 429, 12.0, "exceed the rate limit"),
        ("anthropic_error_529", ModelTransientError, "overloaded", 529, None, "Overloaded"),
        ("anthropic_error_500", ModelTransientError, "server_error", 500, None, "Internal server error"),
        # No error type says "too long": the reason comes from the status, never from the message.
        ("anthropic_error_context_length", ModelPermanentError, "bad_request", 400, None, "too long"),
        ("anthropic_error_401", ModelAuthError, "unauthorized", 401, None, "invalid x-api-key"),
    ],
)
async def test_error_answers(
    server: FakeModelServer,
    provider: AnthropicProvider,
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


async def test_headers_option_adds_headers_and_may_pin_the_version(server: FakeModelServer) -> None:
    server.enqueue(load("anthropic_message_tool_use").response)
    provider = make_provider(
        server,
        headers={"Anthropic-Version": "2099-01-01", "anthropic-beta": "token-efficient-tools-2025-02-19"},
    )
    try:
        await provider.complete(make_request())
    finally:
        await provider.aclose()

    headers = server.requests[0].headers
    assert (headers["anthropic-version"], headers["anthropic-beta"]) == (
        "2099-01-01",
        "token-efficient-tools-2025-02-19",
    )


async def test_through_the_registry_with_the_key_from_the_environment(
    server: FakeModelServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv(KEY_ENV, KEY)
    exchange = load("anthropic_stream_tool_use")
    server.enqueue(exchange.response, load("anthropic_error_401").response)
    spec = ModelSpecData(
        provider="anthropic", name=SPEC.name, options={"base_url": server.url, "api_key_env": KEY_ENV}
    )
    async with ModelRegistry(get_model_plugin_manager(entrypoints=False)) as registry:
        provider = registry.provider(spec)
        deltas: list[str] = []
        response = await provider.complete(make_request(), on_text_delta=deltas.append)
        with pytest.raises(ModelAuthError) as caught:
            await provider.complete(make_request(), on_text_delta=deltas.append)

    assert isinstance(provider, AnthropicProvider)
    assert response.tool_calls[0].tool == "orders.lookup"
    assert exchange.mismatches(server.requests[0]) == []
    assert server.requests[0].headers["x-api-key"] == KEY
    assert "messages call run_id=run-7" in caplog.text
    assert KEY not in caplog.text and KEY not in repr(caught.value) and KEY not in repr(provider)


async def test_connection_refused_is_transient() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago, with nobody listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    provider = AnthropicProvider(
        options={"base_url": f"http://127.0.0.1:{port}", "api_key_env": KEY_ENV}, environ={KEY_ENV: KEY}
    )
    try:
        error, deltas = await stream(provider)
    finally:
        await provider.aclose()

    assert isinstance(error, ModelTransientError)
    assert (error.reason, deltas) == ("connection", [])
    assert "cannot reach the model endpoint" in error.message


async def test_a_server_that_never_answers_is_a_timeout(
    server: FakeModelServer, provider: AnthropicProvider
) -> None:
    server.enqueue(FakeResponse(hang=True))

    error, _ = await stream(provider, make_request(timeout_s=0.2))

    assert isinstance(error, ModelTransientError) and error.reason == "timeout"
    assert len(server.requests) == 1
