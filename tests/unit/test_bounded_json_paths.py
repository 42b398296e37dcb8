"""Every runtime path that parses JSON a model or tool wrote: hostile nesting is a typed outcome.

Each of these raised RecursionError before (a crash of the run's driver); now each is the
path's own documented error, or a harmless fallback.
"""

from __future__ import annotations

import dataclasses

import pytest

from agentrt.server.models import (
    Message,
    ModelError,
    ModelPermanentError,
    ModelRequest,
    ModelSpecData,
    ModelToolCall,
)
from agentrt.server.models._anthropic_stream import MessagesStream
from agentrt.server.models._anthropic_wire import build_messages_request
from agentrt.server.models._anthropic_wire import error_from_response as anthropic_error
from agentrt.server.models._openai_stream import ChatStream
from agentrt.server.models._openai_wire import error_from_response as openai_error
from agentrt.server.models._sse import ServerSentEvent
from agentrt.server.policies import Policies, get_policy_plugin_manager

DEEP = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a":' * 100_000 + "1" + "}" * 100_000

REQUEST = ModelRequest(
    run_id="run-1",
    step=1,
    spec=ModelSpecData(provider="openai", name="gpt-test", options={}),
    messages=(Message(role="user", content="hi"),),
    tools=(),
    timeout_s=5,
)


@pytest.mark.parametrize("data", [DEEP, DEEP_OBJECT])
def test_a_deep_openai_stream_event_is_a_bad_response(data: str) -> None:
    stream = ChatStream(request=REQUEST, tool_names={}, on_text_delta=None)
    with pytest.raises(ModelPermanentError) as caught:
        stream.feed(ServerSentEvent(event="message", data=data))
    assert caught.value.reason == "bad_response"


def test_a_deep_anthropic_stream_event_is_a_bad_response() -> None:
    stream = MessagesStream(request=REQUEST, tool_names={}, on_text_delta=None)
    with pytest.raises(ModelPermanentError) as caught:
        stream.feed(ServerSentEvent(event="message_start", data=DEEP_OBJECT))
    assert caught.value.reason == "bad_response"


@pytest.mark.parametrize("error_from_response", [openai_error, anthropic_error])
def test_a_deep_error_body_is_read_as_text(error_from_response: object) -> None:
    error = error_from_response(500, {}, DEEP.encode())  # type: ignore[operator]
    assert isinstance(error, ModelError)
    assert len(str(error)) < 2000


def test_a_history_holding_refused_deep_arguments_still_builds_an_anthropic_request() -> None:
    # The decider refused the call as INVALID_INPUT; the model must still be asked again.
    call = ModelToolCall(call_id="c1", tool="orders.lookup", arguments_json=DEEP)
    messages = (
        Message(role="user", content="hi"),
        Message(role="assistant", content="", tool_calls=(call,)),
        Message(role="tool", content='{"error": "TOOL_ERROR_CODE_INVALID_INPUT"}', tool_call_id="c1"),
    )
    request = dataclasses.replace(REQUEST, messages=messages)
    body, _ = build_messages_request(request, max_tokens=100)
    assistant = next(m for m in body["messages"] if m["role"] == "assistant")
    assert [b["input"] for b in assistant["content"] if b["type"] == "tool_use"] == [{}]


def test_approval_policy_takes_deep_arguments() -> None:
    policies = Policies(get_policy_plugin_manager())
    answer = policies.approval(
        tool="refund.issue", arguments_json=DEEP_OBJECT, agent_name="a", options={}, flagged=False
    )
    assert not answer.required  # the decider refuses the call before anything runs
