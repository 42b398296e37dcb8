"""Assembly of streamed Chat Completions answers (chat.completion.chunk events), without I/O."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentrt.server.models import (
    Message,
    ModelError,
    ModelPermanentError,
    ModelRequest,
    ModelSpecData,
    ModelToolCall,
    ModelTransientError,
)
from agentrt.server.models._openai_stream import ChatStream, error_from_stream
from agentrt.server.models._sse import ServerSentEvent

REQUEST = ModelRequest(
    run_id="run-1",
    step=3,
    spec=ModelSpecData(provider="openai", name="gpt-test", options={}),
    messages=(Message(role="user", content="Where is A100?"),),
    tools=(),
    timeout_s=5,
)


def event(data: Any) -> ServerSentEvent:
    return ServerSentEvent(event="message", data=data if isinstance(data, str) else json.dumps(data))


def chunk(
    delta: dict[str, Any] | None = None, finish_reason: str | None = None, **extra: Any
) -> ServerSentEvent:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
    return event({"object": "chat.completion.chunk", "choices": choices, **extra})


def run(*events: ServerSentEvent, names: dict[str, str] | None = None) -> tuple[ChatStream, list[str]]:
    deltas: list[str] = []
    stream = ChatStream(request=REQUEST, tool_names=names or {}, on_text_delta=deltas.append)
    results = [stream.feed(item) for item in events]
    assert results == [False] * (len(events) - 1) + [True]
    assert stream.done
    return stream, deltas


def test_text_fragments_are_passed_on_and_joined() -> None:
    stream, deltas = run(
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hel"}),
        chunk({"content": "lo"}),
        chunk({}, "stop"),
        chunk(usage={"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14}),
        event("[DONE]"),
    )

    response = stream.response()
    assert deltas == ["Hel", "lo"]  # the empty first content is not a delta
    assert (response.text, response.tool_calls, response.finish_reason) == ("Hello", (), "stop")
    assert (response.input_tokens, response.output_tokens) == (12, 2)


def test_tool_call_fragments_are_assembled_by_index() -> None:
    stream, deltas = run(
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "orders__", "arguments": ""},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"name": "lookup", "arguments": '{"order'}}]}),
        chunk(
            {"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "ping", "arguments": "{}"}}]}
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '_id":"A100"}'}}]}),
        chunk({}, "tool_calls"),
        event("[DONE]"),
        names={"orders__lookup": "orders.lookup"},
    )

    response = stream.response()
    assert deltas == []
    assert response.tool_calls == (
        ModelToolCall(call_id="call_a", tool="orders.lookup", arguments_json='{"order_id":"A100"}'),
        ModelToolCall(call_id="call_b", tool="ping", arguments_json="{}"),
    )
    assert response.finish_reason == "tool_calls"
    assert response.input_tokens > 0 and response.output_tokens > 0  # estimated: no usage chunk


def test_compatible_server_quirks() -> None:
    # No index, no id, arguments as an object, no finish_reason, a refusal instead of content.
    stream, deltas = run(
        chunk({"tool_calls": [{"function": {"name": "a__b", "arguments": {"x": 1}}}]}),
        chunk({"refusal": "I can't."}),
        event(" [DONE] "),
    )

    response = stream.response()
    assert response.tool_calls == (ModelToolCall(call_id="call_3_0", tool="a.b", arguments_json='{"x":1}'),)
    assert (response.text, deltas, response.finish_reason) == ("I can't.", ["I can't."], "tool_calls")


def test_other_choices_are_ignored() -> None:
    stream, _ = run(
        event(
            {
                "choices": [
                    {"index": 1, "delta": {"content": "other"}},
                    {"index": 0, "delta": {"content": "x"}},
                ]
            }
        ),
        event("[DONE]"),
    )

    assert stream.response().text == "x"


def test_a_tool_call_without_a_name_is_a_bad_response() -> None:
    stream, _ = run(
        chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"arguments": "{}"}}]}), event("[DONE]")
    )

    with pytest.raises(ModelPermanentError, match="no function name") as caught:
        stream.response()

    assert caught.value.reason == "bad_response"


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ("{not json", "not JSON"),
        ("[1]", "not a JSON object"),
        ('{"choices": {"index": 0}}', "not a list"),
        ('{"choices": [{"index": 0, "delta": {"tool_calls": {"index": 0}}}]}', "not a list"),
        ('{"choices": [{"index": 0, "delta": {"tool_calls": [3]}}]}', "non-object"),
    ],
)
def test_malformed_events_are_bad_responses(data: str, match: str) -> None:
    stream = ChatStream(request=REQUEST, tool_names={}, on_text_delta=None)

    with pytest.raises(ModelPermanentError, match=match) as caught:
        stream.feed(event(data))

    assert caught.value.reason == "bad_response"


@pytest.mark.parametrize(
    ("error", "kind", "reason"),
    [
        ({"message": "The server had an error", "type": "server_error"}, ModelTransientError, "server_error"),
        (
            {"message": "slow down", "type": "tokens", "code": "rate_limit_exceeded"},
            ModelTransientError,
            "rate_limited",
        ),
        ({"message": "bad", "type": "invalid_request_error"}, ModelPermanentError, "bad_request"),
        (
            {
                "message": "This model's maximum context length is 8192 tokens",
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
            },
            ModelPermanentError,
            "context_length_exceeded",
        ),
        # The message is never read: only the typed code and type decide.
        (
            {"message": "This model's maximum context length is 8192 tokens", "type": "server_error"},
            ModelTransientError,
            "server_error",
        ),
        (
            {"message": "rate_limit exceeded, timeout", "type": "invalid_request_error"},
            ModelPermanentError,
            "bad_request",
        ),
        ("upstream failed", ModelTransientError, "server_error"),
    ],
)
def test_error_objects_in_the_stream(error: Any, kind: type[ModelError], reason: str) -> None:
    stream = ChatStream(request=REQUEST, tool_names={}, on_text_delta=None)

    with pytest.raises(kind) as caught:
        stream.feed(event({"error": error}))

    assert caught.value.reason == reason
    assert caught.value.message.startswith("model stream reported an error")
    assert caught.value.status_code is None


def test_stream_errors_are_redacted() -> None:
    key = "sk-proj-secret-0123456789"

    error = error_from_stream({"message": f"bad key {key}"}, secret=key)

    assert key not in str(error)
