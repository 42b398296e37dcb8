"""The ``anthropic`` provider's pure mapping: request JSON, answers, streamed events, errors, options."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from agentrt.server.models import (
    AnthropicProvider,
    Message,
    ModelAuthError,
    ModelConfigError,
    ModelError,
    ModelPermanentError,
    ModelRequest,
    ModelSpecData,
    ModelToolCall,
    ModelTransientError,
    ToolDef,
)
from agentrt.server.models._anthropic_stream import MessagesStream
from agentrt.server.models._anthropic_wire import (
    build_messages_request,
    error_from_event,
    error_from_response,
    finish_reason,
    parse_messages_response,
)
from agentrt.server.models._sse import ServerSentEvent

KEY = "sk-ant-api03-unit-test-0123456789abcdef"
ENV = {"ANTHROPIC_API_KEY": KEY}
SCHEMA = {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}
LOOKUP = ToolDef(name="orders.lookup", description="Look up an order.", input_schema=SCHEMA)
CALL_A = ModelToolCall(call_id="toolu_a", tool="orders.lookup", arguments_json='{"order_id":"A100"}')
CALL_B = ModelToolCall(call_id="toolu_b", tool="orders.lookup", arguments_json='{"order_id":"B200"}')
NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)


def make_request(*messages: Message, tools: tuple[ToolDef, ...] = (LOOKUP,)) -> ModelRequest:
    return ModelRequest(
        run_id="run-1",
        step=2,
        spec=ModelSpecData(provider="anthropic", name="claude-test", options={}),
        messages=messages
        or (Message(role="system", content="Be brief."), Message(role="user", content="Hi")),
        tools=tools,
        timeout_s=5,
    )


def test_build_request_maps_roles_tool_uses_and_merged_tool_results() -> None:
    request = make_request(
        Message(role="system", content="Be brief."),
        Message(role="system", content="Answer in English."),
        Message(role="user", content="Where are A100 and B200?"),
        Message(role="assistant", content="Looking.", tool_calls=(CALL_A, CALL_B)),
        Message(role="tool", tool_call_id="toolu_a", content='{"status":"shipped"}'),
        Message(role="tool", tool_call_id="toolu_b", content='{"status":"packed"}'),
        Message(role="user", content="And the carrier?"),
        Message(role="assistant", content="UPS."),
        Message(
            role="assistant", tool_calls=(ModelToolCall(call_id="toolu_c", tool="ping", arguments_json=""),)
        ),
        Message(role="tool", tool_call_id="toolu_c", content=""),
        Message(role="user", content=""),
    )

    body, names = build_messages_request(request, max_tokens=256, temperature=0.5, stream=True)

    assert names == {"orders__lookup": "orders.lookup"}
    assert body == {
        "model": "claude-test",
        "max_tokens": 256,
        "system": "Be brief.\n\nAnswer in English.",
        "messages": [
            {"role": "user", "content": "Where are A100 and B200?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Looking."},
                    {
                        "type": "tool_use",
                        "id": "toolu_a",
                        "name": "orders__lookup",
                        "input": {"order_id": "A100"},
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_b",
                        "name": "orders__lookup",
                        "input": {"order_id": "B200"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_a", "content": '{"status":"shipped"}'},
                    {"type": "tool_result", "tool_use_id": "toolu_b", "content": '{"status":"packed"}'},
                    {"type": "text", "text": "And the carrier?"},
                ],
            },
            {"role": "assistant", "content": "UPS."},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_c", "name": "ping", "input": {}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_c", "content": ""}]},
        ],
        "tools": [{"name": "orders__lookup", "description": "Look up an order.", "input_schema": SCHEMA}],
        "temperature": 0.5,
        "stream": True,
    }
    json.dumps(body)


def test_build_request_minimal() -> None:
    body, names = build_messages_request(
        make_request(Message(role="user", content="Hi"), tools=()), max_tokens=1
    )

    assert body == {"model": "claude-test", "max_tokens": 1, "messages": [{"role": "user", "content": "Hi"}]}
    assert names == {}


@pytest.mark.parametrize(
    ("message", "match"),
    [
        (Message(role="tool", content="{}"), "tool_call_id"),
        (Message(role="robot", content="x"), "unknown message role"),  # type: ignore[arg-type]
        (
            Message(
                role="assistant", tool_calls=(ModelToolCall(call_id="c", tool="t", arguments_json="[1]"),)
            ),
            "not a JSON object",
        ),
        (
            Message(
                role="assistant", tool_calls=(ModelToolCall(call_id="c", tool="t", arguments_json="{bad"),)
            ),
            "not a JSON object",
        ),
    ],
)
def test_histories_anthropic_cannot_take_are_permanent(message: Message, match: str) -> None:
    with pytest.raises(ModelPermanentError, match=match) as caught:
        build_messages_request(make_request(Message(role="user", content="Hi"), message), max_tokens=10)

    assert caught.value.reason == "bad_request"


def test_tool_names_anthropic_cannot_take_are_permanent() -> None:
    tools = (ToolDef(name="orders lookup", description="", input_schema={}),)

    with pytest.raises(ModelPermanentError, match="cannot be sent to Anthropic") as caught:
        build_messages_request(make_request(tools=tools), max_tokens=10)

    assert caught.value.reason == "invalid_tool_name"


def test_parse_message_with_text_tool_uses_and_cached_usage() -> None:
    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "x"},
            {"type": "text", "text": "Looking "},
            {"type": "text", "text": "now."},
            {"type": "tool_use", "id": "toolu_a", "name": "orders__lookup", "input": {"order_id": "Ä1"}},
        ],
        "stop_reason": "tool_use",
        "usage": {
            "input_tokens": 10,
            "cache_creation_input_tokens": 5,
            "cache_read_input_tokens": 100,
            "output_tokens": 7,
        },
    }

    response = parse_messages_response(
        body, request=make_request(), tool_names={"orders__lookup": "orders.lookup"}
    )

    assert response.text == "Looking now."
    assert response.tool_calls == (
        ModelToolCall(call_id="toolu_a", tool="orders.lookup", arguments_json='{"order_id":"Ä1"}'),
    )
    assert (response.input_tokens, response.output_tokens, response.finish_reason) == (115, 7, "tool_calls")


def test_parse_without_usage_estimates() -> None:
    response = parse_messages_response({"content": [{"type": "text", "text": "Hi"}]}, request=make_request())

    assert response.input_tokens > 0 and response.output_tokens > 0
    assert response.finish_reason == "stop"


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"content": None},
        {"content": ["x"]},
        {"content": [{"type": "text", "text": 3}]},
        {"content": [{"type": "tool_use", "id": "t", "name": "n", "input": "{}"}]},
        {"content": [{"type": "tool_use", "name": "n", "input": {}}]},
    ],
)
def test_bad_message_shapes_are_permanent(body: Any) -> None:
    with pytest.raises(ModelPermanentError, match="unexpected response") as caught:
        parse_messages_response(body, request=make_request())

    assert caught.value.reason == "bad_response"


@pytest.mark.parametrize(
    ("stop_reason", "expected"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("tool_use", "tool_calls"),
        ("max_tokens", "length"),
        ("refusal", "content_filter"),
        ("pause_turn", "pause_turn"),
        (None, "stop"),
    ],
)
def test_finish_reasons(stop_reason: str | None, expected: str) -> None:
    assert finish_reason(stop_reason, has_calls=False) == expected


def error_body(type_: str, message: str = "boom") -> bytes:
    return json.dumps(
        {"type": "error", "error": {"type": type_, "message": message}, "request_id": "req_1"}
    ).encode()


@pytest.mark.parametrize(
    ("status", "headers", "body", "error", "reason", "retry_after_s"),
    [
        (
            429,
            {"retry-after": "12"},
            error_body("rate_limit_error"),
            ModelTransientError,
            "rate_limited",
            12.0,
        ),
        (529, {}, error_body("overloaded_error", "Overloaded"), ModelTransientError, "overloaded", None),
        (503, {}, error_body("overloaded_error"), ModelTransientError, "overloaded", None),
        (500, {}, error_body("api_error"), ModelTransientError, "server_error", None),
        (502, {}, b"<html>Bad Gateway</html>", ModelTransientError, "server_error", None),
        (504, {}, error_body("timeout_error"), ModelTransientError, "timeout", None),
        (408, {}, b"", ModelTransientError, "timeout", None),
        # The API gives a prompt that is too long no type of its own; its message is never read.
        (
            400,
            {},
            error_body("invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum"),
            ModelPermanentError,
            "bad_request",
            None,
        ),
        (
            400,
            {},
            error_body(
                "invalid_request_error", "input length and `max_tokens` exceed context limit: 1 + 2 > 3"
            ),
            ModelPermanentError,
            "bad_request",
            None,
        ),
        (500, {}, error_body("api_error", "prompt is too long"), ModelTransientError, "server_error", None),
        (
            400,
            {},
            error_body("invalid_request_error", "messages: roles must alternate"),
            ModelPermanentError,
            "bad_request",
            None,
        ),
        (413, {}, error_body("request_too_large"), ModelPermanentError, "request_too_large", None),
        (404, {}, error_body("not_found_error"), ModelPermanentError, "not_found", None),
        (402, {}, error_body("billing_error"), ModelPermanentError, "insufficient_quota", None),
        (418, {}, b"{}", ModelPermanentError, "http_error", None),
        (
            401,
            {},
            error_body("authentication_error", "invalid x-api-key"),
            ModelAuthError,
            "unauthorized",
            None,
        ),
        (403, {}, error_body("permission_error"), ModelAuthError, "forbidden", None),
    ],
)
def test_error_from_response(
    status: int,
    headers: dict[str, str],
    body: bytes,
    error: type[ModelError],
    reason: str,
    retry_after_s: float | None,
) -> None:
    result = error_from_response(status, headers, body, now=NOW)

    assert type(result) is error
    assert (result.reason, result.status_code, result.retry_after_s) == (reason, status, retry_after_s)
    assert result.message.startswith(f"model endpoint returned HTTP {status}")


def test_error_messages_never_carry_the_key() -> None:
    error = error_from_response(401, {}, error_body("authentication_error", f"bad key {KEY}"), secret=KEY)

    assert KEY not in str(error) and "sk-ant" not in str(error)


@pytest.mark.parametrize(
    ("type_", "error", "reason"),
    [
        ("overloaded_error", ModelTransientError, "overloaded"),
        ("rate_limit_error", ModelTransientError, "rate_limited"),
        ("api_error", ModelTransientError, "server_error"),
        ("something_new", ModelTransientError, "server_error"),
        ("invalid_request_error", ModelPermanentError, "bad_request"),
        ("authentication_error", ModelAuthError, "unauthorized"),
    ],
)
def test_error_events(type_: str, error: type[ModelError], reason: str) -> None:
    result = error_from_event(error_body(type_, "Overloaded").decode())

    assert type(result) is error
    assert (result.reason, result.status_code) == (reason, None)
    assert result.message == f"model stream reported {type_}: Overloaded"


# --- streamed events ----------------------------------------------------------------------------


def sse(type_: str, **fields: Any) -> ServerSentEvent:
    return ServerSentEvent(event=type_, data=json.dumps({"type": type_, **fields}))


def message_start(input_tokens: int = 20, **usage: int) -> ServerSentEvent:
    return sse(
        "message_start",
        message={
            "id": "msg_1",
            "content": [],
            "usage": {"input_tokens": input_tokens, "output_tokens": 1, **usage},
        },
    )


def feed_all(*events: ServerSentEvent) -> tuple[MessagesStream, list[str]]:
    deltas: list[str] = []
    stream = MessagesStream(
        request=make_request(), tool_names={"orders__lookup": "orders.lookup"}, on_text_delta=deltas.append
    )
    results = [stream.feed(item) for item in events]
    assert results == [False] * (len(events) - 1) + [True]
    return stream, deltas


def test_stream_of_text_and_tool_uses() -> None:
    stream, deltas = feed_all(
        message_start(30, cache_read_input_tokens=70),
        sse("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        sse("ping"),
        sse("content_block_delta", index=0, delta={"type": "text_delta", "text": "Let me "}),
        sse("content_block_delta", index=0, delta={"type": "text_delta", "text": "check."}),
        sse("content_block_stop", index=0),
        sse("content_block_start", index=1, content_block={"type": "thinking", "thinking": ""}),
        sse("content_block_delta", index=1, delta={"type": "thinking_delta", "thinking": "hmm"}),
        sse(
            "content_block_start",
            index=2,
            content_block={"type": "tool_use", "id": "toolu_a", "name": "orders__lookup", "input": {}},
        ),
        sse("content_block_delta", index=2, delta={"type": "input_json_delta", "partial_json": ""}),
        sse(
            "content_block_delta",
            index=2,
            delta={"type": "input_json_delta", "partial_json": '{"order_id": "A'},
        ),
        sse("content_block_delta", index=2, delta={"type": "input_json_delta", "partial_json": '100"}'}),
        sse("content_block_stop", index=2),
        sse(
            "content_block_start",
            index=3,
            content_block={"type": "tool_use", "id": "toolu_b", "name": "ping", "input": {}},
        ),
        sse("content_block_stop", index=3),
        sse("some_future_event", anything=1),
        sse(
            "message_delta",
            delta={"stop_reason": "tool_use", "stop_sequence": None},
            usage={"output_tokens": 40},
        ),
        sse("message_stop"),
    )

    response = stream.response()
    assert deltas == ["Let me ", "check."]
    assert response.text == "Let me check."
    assert response.tool_calls == (
        ModelToolCall(call_id="toolu_a", tool="orders.lookup", arguments_json='{"order_id": "A100"}'),
        ModelToolCall(call_id="toolu_b", tool="ping", arguments_json="{}"),
    )
    assert (response.input_tokens, response.output_tokens, response.finish_reason) == (100, 40, "tool_calls")


def test_stream_text_in_the_start_block_and_estimates_without_usage() -> None:
    stream, deltas = feed_all(
        sse("content_block_start", index=0, content_block={"type": "text", "text": "Hi"}),
        sse("message_stop"),
    )

    response = stream.response()
    assert (deltas, response.text, response.finish_reason) == (["Hi"], "Hi", "stop")
    assert response.input_tokens > 0 and response.output_tokens > 0


def test_error_event_raises() -> None:
    stream = MessagesStream(request=make_request(), tool_names={}, on_text_delta=None)
    stream.feed(message_start())

    with pytest.raises(ModelTransientError, match="overloaded_error: Overloaded") as caught:
        stream.feed(
            ServerSentEvent(event="error", data=error_body("overloaded_error", "Overloaded").decode())
        )

    assert caught.value.reason == "overloaded"


@pytest.mark.parametrize(
    ("item", "match"),
    [
        (ServerSentEvent(event="message_start", data="{oops"), "not JSON"),
        (ServerSentEvent(event="message_start", data="[]"), "not an object"),
        (sse("content_block_start", content_block={"type": "text"}), "has no index"),
        (sse("content_block_start", index=0), "without a content_block"),
        (
            sse("content_block_start", index=0, content_block={"type": "tool_use", "id": "x"}),
            "without id or name",
        ),
        (sse("content_block_delta", index=0), "without a delta"),
        (
            sse("content_block_delta", index=5, delta={"type": "input_json_delta", "partial_json": "{"}),
            "not a tool_use",
        ),
    ],
)
def test_malformed_events_are_bad_responses(item: ServerSentEvent, match: str) -> None:
    stream = MessagesStream(request=make_request(), tool_names={}, on_text_delta=None)

    with pytest.raises(ModelPermanentError, match=match) as caught:
        stream.feed(item)

    assert caught.value.reason == "bad_response"


# --- options --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"api_key": "sk-x"}, "must not carry secrets \\(api_key\\)"),
        ({"base_url": "ftp://example.com"}, "base_url: Value error, must be an http:// or https:// URL"),
        ({"headers": {"X-Api-Key": "sk-x"}}, "headers: Value error, X-Api-Key would carry a secret"),
        ({"temperature": 1.5}, "temperature: Input should be less than or equal to 1"),
        ({"max_tokens": 0}, "max_tokens: Input should be greater than or equal to 1"),
        ({"organization": "org"}, "organization: Extra inputs are not permitted"),
    ],
)
def test_bad_anthropic_options_are_config_errors(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ModelConfigError, match=match) as caught:
        AnthropicProvider(options=options, environ=ENV)

    assert "sk-x" not in str(caught.value)
    assert caught.value.reason == "bad_options"


def test_missing_key_is_a_config_error() -> None:
    with pytest.raises(ModelConfigError, match="ANTHROPIC_API_KEY is not set") as caught:
        AnthropicProvider(options={}, environ={})

    assert caught.value.reason == "missing_api_key"


async def test_repr_names_the_variable_not_the_key() -> None:
    provider = AnthropicProvider(options={"api_key_env": "MY_KEY"}, environ={"MY_KEY": KEY})
    try:
        assert (
            repr(provider) == "AnthropicProvider(base_url='https://api.anthropic.com', api_key_env='MY_KEY')"
        )
    finally:
        await provider.aclose()
