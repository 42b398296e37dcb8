"""The reproducibility record's provider ids: each provider returns its response id and request id.

OpenAI answers carry ``id`` (``chatcmpl-...``, on every chunk of a stream) and an ``x-request-id``
header; Anthropic answers carry ``id`` (``msg_...``, in ``message_start`` of a stream) and a
``request-id`` header. Both are taken whether the call streams or not, and are empty when the
provider gives none.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentrt.server.models import Message, ModelRequest, ModelSpecData
from agentrt.server.models._anthropic import AnthropicProvider
from agentrt.server.models._openai import OpenAIProvider
from agentrt.testing import FakeModelServer, FakeResponse
from agentrt.testing._model_server import sse_event

KEY_ENV = "AGENTRT_FAKE_KEY"
KEY = "sk-fake-response-ids-0123456789"


def request(provider: str) -> ModelRequest:
    return ModelRequest(
        run_id="r",
        step=1,
        spec=ModelSpecData(provider=provider, name="m", options={}),
        messages=(Message(role="user", content="hi"),),
        tools=(),
        timeout_s=10,
    )


@pytest.fixture
async def server() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer() as fake:
        yield fake


def chat(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-42",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }


async def test_openai_ids_with_and_without_streaming(server: FakeModelServer) -> None:
    provider = OpenAIProvider(
        options={"base_url": server.url + "/v1", "api_key_env": KEY_ENV}, environ={KEY_ENV: KEY}
    )
    try:
        server.enqueue(FakeResponse.json_body(chat("hello"), headers={"x-request-id": "req_abc"}))
        whole = await provider.complete(request("openai"))
        assert (whole.response_id, whole.request_id) == ("chatcmpl-42", "req_abc")

        chunk = {
            "id": "chatcmpl-43",
            "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}],
        }
        server.enqueue(
            FakeResponse.event_stream(
                sse_event(chunk), sse_event("[DONE]"), headers={"x-request-id": "req_def"}
            )
        )
        streamed = await provider.complete(request("openai"), on_text_delta=lambda _: None)
        assert (streamed.text, streamed.response_id, streamed.request_id) == ("hi", "chatcmpl-43", "req_def")

        bare = chat("no ids")
        del bare["id"]
        server.enqueue(FakeResponse.json_body(bare))
        none = await provider.complete(request("openai"))
        assert (none.response_id, none.request_id) == ("", "")
    finally:
        await provider.aclose()


async def test_anthropic_ids_with_and_without_streaming(server: FakeModelServer) -> None:
    provider = AnthropicProvider(
        options={"base_url": server.url, "api_key_env": KEY_ENV}, environ={KEY_ENV: KEY}
    )
    try:
        message = {
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": "hello"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 3, "output_tokens": 1},
        }
        server.enqueue(FakeResponse.json_body(message, headers={"request-id": "req_011"}))
        whole = await provider.complete(request("anthropic"))
        assert (whole.response_id, whole.request_id) == ("msg_01", "req_011")

        events = [
            sse_event(
                {"type": "message_start", "message": {**message, "id": "msg_02", "content": []}},
                event="message_start",
            ),
            sse_event(
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                event="content_block_start",
            ),
            sse_event(
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
                event="content_block_delta",
            ),
            sse_event({"type": "message_stop"}, event="message_stop"),
        ]
        server.enqueue(FakeResponse.event_stream(*events, headers={"request-id": "req_012"}))
        streamed = await provider.complete(request("anthropic"), on_text_delta=lambda _: None)
        assert (streamed.text, streamed.response_id, streamed.request_id) == ("hi", "msg_02", "req_012")
    finally:
        await provider.aclose()
