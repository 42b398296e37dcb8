"""The ``openai`` provider's pure mapping (request JSON, response parsing, error mapping) and options."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from agentrt.server.models import (
    Message,
    ModelAuthError,
    ModelConfigError,
    ModelError,
    ModelPermanentError,
    ModelRequest,
    ModelSpecData,
    ModelToolCall,
    ModelTransientError,
    OpenAIProvider,
    ToolDef,
)
from agentrt.server.models._openai_wire import (
    build_chat_request,
    error_from_response,
    from_wire_tool_name,
    message_to_wire,
    parse_chat_response,
    parse_retry_after,
    redact,
    to_wire_tool_name,
)

KEY = "sk-unit-test-0123456789abcdef"
ENV = {"OPENAI_API_KEY": KEY}
SCHEMA = {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}
LOOKUP = ToolDef(name="orders.lookup", description="Look up an order.", input_schema=SCHEMA)
CALL = ModelToolCall(call_id="call_1", tool="orders.lookup", arguments_json='{"order_id":"A100"}')


def make_request(
    *, messages: tuple[Message, ...] | None = None, tools: tuple[ToolDef, ...] = (LOOKUP,), step: int = 1
) -> ModelRequest:
    return ModelRequest(
        run_id="run-1",
        step=step,
        spec=ModelSpecData(provider="openai", name="gpt-test", options={}),
        messages=messages
        if messages is not None
        else (Message(role="system", content="Be brief."), Message(role="user", content="Where is A100?")),
        tools=tools,
        timeout_s=5,
    )


def completion(
    message: dict[str, Any], *, finish_reason: str | None = "stop", usage: Any = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-test",
        "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish_reason}
        ],
    }
    if usage is not None:
        body["usage"] = usage
    return body


@pytest.mark.parametrize(
    ("name", "wire"), [("orders.lookup", "orders__lookup"), ("a.b.c", "a__b__c"), ("x-y", "x-y")]
)
def test_tool_names_map_reversibly(name: str, wire: str) -> None:
    assert to_wire_tool_name(name) == wire
    assert from_wire_tool_name(wire) == name


def test_messages_map_to_the_chat_completions_shape() -> None:
    assert message_to_wire(Message(role="system", content="s")) == {"role": "system", "content": "s"}
    assert message_to_wire(Message(role="user", content="u")) == {"role": "user", "content": "u"}
    assert message_to_wire(Message(role="assistant", content="a")) == {"role": "assistant", "content": "a"}
    assert message_to_wire(Message(role="assistant", tool_calls=(CALL,))) == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "orders__lookup", "arguments": '{"order_id":"A100"}'},
            }
        ],
    }
    assert message_to_wire(Message(role="assistant", content="Checking.", tool_calls=(CALL,)))["content"] == (
        "Checking."
    )
    assert message_to_wire(Message(role="tool", content='{"ok":true}', tool_call_id="call_1")) == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": '{"ok":true}',
    }


def test_tool_message_without_call_id_is_permanent() -> None:
    with pytest.raises(ModelPermanentError, match="tool_call_id"):
        message_to_wire(Message(role="tool", content="{}"))


def test_unknown_role_is_permanent() -> None:
    with pytest.raises(ModelPermanentError, match="unknown message role 'robot'"):
        message_to_wire(Message(role="robot", content="x"))  # type: ignore[arg-type]


def test_build_chat_request() -> None:
    body, names = build_chat_request(make_request(), temperature=0.2, max_tokens=100)

    assert body == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Where is A100?"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "orders__lookup",
                    "description": "Look up an order.",
                    "parameters": SCHEMA,
                },
            }
        ],
        "tool_choice": "auto",
        "temperature": 0.2,
        "max_tokens": 100,
    }
    assert names == {"orders__lookup": "orders.lookup"}
    json.dumps(body)  # serialisable as is


def test_build_chat_request_without_tools_or_sampling_options() -> None:
    body, names = build_chat_request(make_request(tools=()))

    assert set(body) == {"model", "messages"}
    assert names == {}


@pytest.mark.parametrize(
    ("tools", "match"),
    [
        (("orders lookup",), "cannot be sent to OpenAI"),
        (("x" * 65,), "cannot be sent to OpenAI"),
        (("a.b", "a__b"), "both map to the function name 'a__b'"),
    ],
)
def test_tool_names_openai_cannot_take_are_permanent(tools: tuple[str, ...], match: str) -> None:
    defs = tuple(ToolDef(name=name, description="", input_schema={}) for name in tools)

    with pytest.raises(ModelPermanentError, match=match) as caught:
        build_chat_request(make_request(tools=defs))

    assert caught.value.reason == "invalid_tool_name"


def test_parse_tool_calls_and_usage() -> None:
    body = completion(
        {
            "content": None,
            "tool_calls": [
                {
                    "id": "call_x",
                    "type": "function",
                    "function": {"name": "orders__lookup", "arguments": '{"a":1}'},
                },
                {"id": "call_y", "type": "function", "function": {"name": "a__b_c", "arguments": "{}"}},
            ],
        },
        finish_reason="tool_calls",
        usage={"prompt_tokens": 52, "completion_tokens": 17, "total_tokens": 69},
    )

    response = parse_chat_response(
        body, request=make_request(), tool_names={"orders__lookup": "orders.lookup"}
    )

    assert response.text == ""
    assert response.tool_calls == (
        ModelToolCall(call_id="call_x", tool="orders.lookup", arguments_json='{"a":1}'),
        ModelToolCall(call_id="call_y", tool="a.b_c", arguments_json="{}"),
    )
    assert (response.input_tokens, response.output_tokens, response.finish_reason) == (52, 17, "tool_calls")


def test_parse_tolerates_compatible_server_quirks() -> None:
    body = completion(
        {"content": None, "tool_calls": [{"function": {"name": "orders__lookup", "arguments": {"a": 1}}}]},
        finish_reason=None,
    )

    response = parse_chat_response(body, request=make_request(step=4))

    assert response.tool_calls == (
        ModelToolCall(call_id="call_4_0", tool="orders.lookup", arguments_json='{"a":1}'),
    )
    assert response.finish_reason == "tool_calls"
    assert response.input_tokens > 0 and response.output_tokens > 0  # estimated without "usage"


def test_parse_refusal_is_the_text() -> None:
    response = parse_chat_response(
        completion({"content": None, "refusal": "I can't help with that."}), request=make_request()
    )

    assert response.text == "I can't help with that."
    assert response.finish_reason == "stop"


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"choices": []},
        {"choices": ["x"]},
        {"choices": [{"message": None}]},
        completion({"content": 3}),
        completion({"content": None, "tool_calls": {"id": "x"}}),
        completion({"content": None, "tool_calls": [{"type": "custom", "custom": {}}]}),
        completion({"content": None, "tool_calls": [{"type": "function", "function": {"arguments": "{}"}}]}),
    ],
)
def test_bad_response_shapes_are_permanent(body: Any) -> None:
    with pytest.raises(ModelPermanentError, match="unexpected response") as caught:
        parse_chat_response(body, request=make_request())

    assert caught.value.reason == "bad_response"


NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"Retry-After": "Wed, 01 Jan 2025 12:00:30 GMT"}, 30.0),
        ({"Retry-After": "Wed, 01 Jan 2025 11:00:00 GMT"}, 0.0),
        ({"Retry-After": "Wed, 01 Jan 2025 12:01:00 -0000"}, 60.0),
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "-3"}, None),
        ({"Retry-After": "inf"}, None),
        ({"retry-after-ms": "x", "retry-after": "2"}, 2.0),
        ({}, None),
    ],
)
def test_parse_retry_after(headers: dict[str, str], expected: float | None) -> None:
    assert parse_retry_after(headers, now=NOW) == expected


def error_body(code: str | None, message: str = "boom", type_: str = "invalid_request_error") -> bytes:
    return json.dumps({"error": {"message": message, "type": type_, "param": None, "code": code}}).encode()


@pytest.mark.parametrize(
    ("status", "headers", "body", "error", "reason", "retry_after_s"),
    [
        (
            429,
            {"retry-after": "7"},
            error_body("rate_limit_exceeded"),
            ModelTransientError,
            "rate_limited",
            7.0,
        ),
        (429, {}, error_body("insufficient_quota"), ModelPermanentError, "insufficient_quota", None),
        (500, {}, b"Internal Server Error", ModelTransientError, "server_error", None),
        (503, {"Retry-After": "2"}, error_body(None), ModelTransientError, "server_error", 2.0),
        (408, {}, b"", ModelTransientError, "timeout", None),
        (409, {}, b"", ModelTransientError, "conflict", None),
        (
            400,
            {},
            error_body("context_length_exceeded"),
            ModelPermanentError,
            "context_length_exceeded",
            None,
        ),
        # Only the typed code says so: a message is never read for a reason.
        (
            400,
            {},
            b'{"error": "This model\'s maximum context length is 8192 tokens"}',
            ModelPermanentError,
            "bad_request",
            None,
        ),
        (400, {}, error_body("invalid_value"), ModelPermanentError, "bad_request", None),
        (404, {}, error_body("model_not_found"), ModelPermanentError, "not_found", None),
        (418, {}, b"{}", ModelPermanentError, "http_error", None),
        (401, {}, error_body("invalid_api_key"), ModelAuthError, "unauthorized", None),
        (403, {}, error_body(None), ModelAuthError, "forbidden", None),
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
    body = error_body("invalid_api_key", f"Incorrect API key provided: {KEY}. Also sk-abc***wxyz.")

    error = error_from_response(401, {}, body, secret=KEY)

    assert KEY not in str(error) and "sk-abc" not in str(error)
    assert "Incorrect API key provided: ***. Also sk-***." in str(error)


def test_redact() -> None:
    assert redact("key=secret-value!", "secret-value") == "key=***!"
    assert redact("short key k stays", "k") == "short key k stays"  # too short to replace safely
    assert redact("Bearer sk-proj-AbC_123-xyz") == "Bearer sk-***"


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"api_key": "sk-x"}, "must not carry secrets \\(api_key\\)"),
        ({"base_url": "ftp://example.com"}, "base_url: Value error, must be an http:// or https:// URL"),
        (
            {"headers": {"Authorization": "Bearer sk-x"}},
            "headers: Value error, Authorization would carry a secret",
        ),
        ({"timeout_s": 0}, "timeout_s: Input should be greater than 0"),
        ({"temperature": 3}, "temperature: Input should be less than or equal to 2"),
        ({"max_tokens": 0}, "max_tokens: Input should be greater than or equal to 1"),
        ({"streaming": True}, "streaming: Extra inputs are not permitted"),
        ({"stream": "sometimes"}, "stream: Input should be a valid boolean"),
        ({"api_key_env": ""}, "api_key_env: String should have at least 1 character"),
    ],
)
def test_bad_openai_options_are_config_errors(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ModelConfigError, match=match) as caught:
        OpenAIProvider(options=options, environ=ENV)

    assert "sk-x" not in str(caught.value)
    assert caught.value.reason == "bad_options"


@pytest.mark.parametrize("environ", [{}, {"OPENAI_API_KEY": ""}])
def test_missing_or_empty_key_is_a_config_error(environ: dict[str, str]) -> None:
    with pytest.raises(ModelConfigError, match="OPENAI_API_KEY is not set") as caught:
        OpenAIProvider(options={}, environ=environ)

    assert caught.value.reason == "missing_api_key"


class Recorder:
    """An httpx transport handler that records requests and answers from a list."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


async def test_provider_sends_headers_and_reports_text_once() -> None:
    recorder = Recorder(httpx.Response(200, json=completion({"content": "Shipped."})))
    provider = OpenAIProvider(
        options={
            "base_url": "http://llm.test/v1/",
            "organization": "org-1",
            "headers": {"X-Team": "support"},
        },
        environ=ENV,
        transport=httpx.MockTransport(recorder),
    )
    deltas: list[str] = []
    try:
        response = await provider.complete(make_request(), on_text_delta=deltas.append)
    finally:
        await provider.aclose()
        await provider.aclose()  # idempotent

    sent = recorder.requests[0]
    assert str(sent.url) == "http://llm.test/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert (sent.headers["openai-organization"], sent.headers["x-team"]) == ("org-1", "support")
    assert response.text == "Shipped." and deltas == ["Shipped."]
    assert KEY not in repr(provider)


@pytest.mark.parametrize(
    ("answer", "error", "reason"),
    [
        (httpx.ConnectError("connection refused"), ModelTransientError, "connection"),
        (httpx.RemoteProtocolError("server disconnected"), ModelTransientError, "connection"),
        (httpx.ReadTimeout("timed out"), ModelTransientError, "timeout"),
        (httpx.UnsupportedProtocol("bad scheme"), ModelConfigError, "bad_options"),
        (httpx.DecodingError("bad gzip"), ModelPermanentError, "bad_response"),
        (httpx.Response(200, content=b"<html>"), ModelPermanentError, "bad_response"),
        (httpx.Response(502, content=b"Bad Gateway"), ModelTransientError, "server_error"),
    ],
)
async def test_provider_maps_transport_failures(
    answer: httpx.Response | Exception, error: type[ModelError], reason: str
) -> None:
    provider = OpenAIProvider(options={}, environ=ENV, transport=httpx.MockTransport(Recorder(answer)))
    try:
        with pytest.raises(error) as caught:
            await provider.complete(make_request())
    finally:
        await provider.aclose()

    assert caught.value.reason == reason
    assert KEY not in str(caught.value)


async def test_no_time_left_is_a_transient_timeout_without_a_call() -> None:
    recorder = Recorder()
    provider = OpenAIProvider(options={}, environ=ENV, transport=httpx.MockTransport(recorder))
    request = make_request()
    try:
        with pytest.raises(ModelTransientError, match="no time left"):
            await provider.complete(
                ModelRequest(
                    run_id="r", step=1, spec=request.spec, messages=request.messages, tools=(), timeout_s=0
                )
            )
    finally:
        await provider.aclose()

    assert recorder.requests == []
