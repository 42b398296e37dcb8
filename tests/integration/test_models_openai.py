"""The ``openai`` provider against a local fake OpenAI server speaking the real Chat Completions JSON."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agentrt.server.models import (
    Message,
    ModelAuthError,
    ModelConfigError,
    ModelPermanentError,
    ModelProvider,
    ModelRegistry,
    ModelRequest,
    ModelSpecData,
    ModelToolCall,
    ModelTransientError,
    ToolDef,
    get_model_plugin_manager,
)

KEY_ENV = "AGENTRT_FAKE_OPENAI_KEY"
KEY = "sk-fake-integration-0123456789"
SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}},
    "required": ["order_id"],
    "additionalProperties": False,
}
LOOKUP = ToolDef(name="orders.lookup", description="Look up an order by id.", input_schema=SCHEMA)
SYSTEM = Message(role="system", content="You are a support agent.")
USER = Message(role="user", content="Where is order A100?")


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False  # read the request, then answer nothing until the test ends


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    json: Any


class FakeOpenAI:
    """A real HTTP server on 127.0.0.1:<free port> that answers from a queue and records requests."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.received: list[Received] = []
        self.release = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                fake.received.append(
                    Received(
                        method="POST",
                        path=self.path,
                        headers={k.lower(): v for k, v in self.headers.items()},
                        json=json.loads(body),
                    )
                )
                reply = fake.replies.pop(0)
                if reply.hang:
                    fake.release.wait(timeout=30)
                    return
                payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output clean

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05})

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()  # joins the handler threads
        self.thread.join()


def completion(
    message: dict[str, Any], finish_reason: str, prompt: int, completion_tokens: int
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_735_689_600,
        "model": "gpt-test",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", **message},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens,
        },
        "system_fingerprint": "fp_test",
    }


def api_error(message: str, type_: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def registry(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ModelRegistry]:
    monkeypatch.setenv(KEY_ENV, KEY)
    async with ModelRegistry(get_model_plugin_manager(entrypoints=False)) as models:
        yield models


def spec_for(fake: FakeOpenAI, **options: Any) -> ModelSpecData:
    return ModelSpecData(
        provider="openai",
        name="gpt-test",
        options={"base_url": fake.base_url, "api_key_env": KEY_ENV, **options},
    )


def request(
    spec: ModelSpecData, *messages: Message, step: int = 1, timeout_s: float | None = 10
) -> ModelRequest:
    return ModelRequest(
        run_id="run-1",
        step=step,
        spec=spec,
        messages=(SYSTEM, USER, *messages),
        tools=(LOOKUP,),
        timeout_s=timeout_s,
    )


async def test_tool_call_then_final_answer_round_trip(fake: FakeOpenAI, registry: ModelRegistry) -> None:
    fake.replies = [
        Reply(
            body=completion(
                {
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_abc",
                            "type": "function",
                            "function": {"name": "orders__lookup", "arguments": '{"order_id":"A100"}'},
                        }
                    ],
                    "refusal": None,
                },
                "tool_calls",
                52,
                17,
            )
        ),
        Reply(body=completion({"content": "Order A100 shipped yesterday.", "refusal": None}, "stop", 80, 9)),
    ]
    spec = spec_for(fake, temperature=0)
    provider: ModelProvider = registry.provider(spec)

    first = await provider.complete(request(spec))
    assistant = Message(role="assistant", tool_calls=first.tool_calls)
    result = Message(role="tool", tool_call_id="call_abc", content='{"status":"shipped"}')
    deltas: list[str] = []
    second = await provider.complete(request(spec, assistant, result, step=2), on_text_delta=deltas.append)

    assert first.tool_calls == (
        ModelToolCall(call_id="call_abc", tool="orders.lookup", arguments_json='{"order_id":"A100"}'),
    )
    assert (first.text, first.input_tokens, first.output_tokens, first.finish_reason) == (
        "",
        52,
        17,
        "tool_calls",
    )
    assert (second.text, second.tool_calls, second.finish_reason) == (
        "Order A100 shipped yesterday.",
        (),
        "stop",
    )
    assert (second.input_tokens, second.output_tokens) == (80, 9)
    assert deltas == ["Order A100 shipped yesterday."]

    tools = [
        {
            "type": "function",
            "function": {
                "name": "orders__lookup",
                "description": "Look up an order by id.",
                "parameters": SCHEMA,
            },
        }
    ]
    base_messages = [
        {"role": "system", "content": "You are a support agent."},
        {"role": "user", "content": "Where is order A100?"},
    ]
    assert [(r.method, r.path) for r in fake.received] == [("POST", "/v1/chat/completions")] * 2
    assert fake.received[0].json == {
        "model": "gpt-test",
        "messages": base_messages,
        "tools": tools,
        "tool_choice": "auto",
        "temperature": 0,
    }
    assert fake.received[1].json == {
        "model": "gpt-test",
        "messages": [
            *base_messages,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_abc",
                        "type": "function",
                        "function": {"name": "orders__lookup", "arguments": '{"order_id":"A100"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_abc", "content": '{"status":"shipped"}'},
        ],
        "tools": tools,
        "tool_choice": "auto",
        "temperature": 0,
        # A delta callback makes the call stream; this server answers in plain JSON all the same.
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    for received in fake.received:
        assert received.headers["authorization"] == f"Bearer {KEY}"
        assert received.headers["content-type"] == "application/json"


async def test_429_with_retry_after_seconds(fake: FakeOpenAI, registry: ModelRegistry) -> None:
    fake.replies = [
        Reply(
            status=429,
            body=api_error("Rate limit reached for gpt-test.", "requests", "rate_limit_exceeded"),
            headers={"Retry-After": "7"},
        )
    ]
    spec = spec_for(fake)

    with pytest.raises(ModelTransientError, match="HTTP 429: Rate limit reached") as caught:
        await registry.provider(spec).complete(request(spec))

    assert (caught.value.reason, caught.value.retry_after_s, caught.value.status_code) == (
        "rate_limited",
        7.0,
        429,
    )


async def test_429_with_retry_after_http_date(fake: FakeOpenAI, registry: ModelRegistry) -> None:
    when = datetime.now(UTC) + timedelta(seconds=120)
    fake.replies = [
        Reply(
            status=429,
            body=api_error("slow down", "requests", None),
            headers={"Retry-After": format_datetime(when, usegmt=True)},
        )
    ]
    spec = spec_for(fake)

    with pytest.raises(ModelTransientError) as caught:
        await registry.provider(spec).complete(request(spec))

    assert caught.value.retry_after_s is not None
    assert 100 < caught.value.retry_after_s <= 120


async def test_500_is_transient(fake: FakeOpenAI, registry: ModelRegistry) -> None:
    fake.replies = [Reply(status=500, body=api_error("The server had an error.", "server_error", None))]
    spec = spec_for(fake)

    with pytest.raises(ModelTransientError) as caught:
        await registry.provider(spec).complete(request(spec))

    assert (caught.value.reason, caught.value.status_code, caught.value.retry_after_s) == (
        "server_error",
        500,
        None,
    )


async def test_context_length_exceeded_is_permanent(fake: FakeOpenAI, registry: ModelRegistry) -> None:
    fake.replies = [
        Reply(
            status=400,
            body=api_error(
                "This model's maximum context length is 8192 tokens. "
                "However, your messages resulted in 9001 tokens.",
                "invalid_request_error",
                "context_length_exceeded",
            ),
        )
    ]
    spec = spec_for(fake)

    with pytest.raises(ModelPermanentError, match="maximum context length") as caught:
        await registry.provider(spec).complete(request(spec))

    assert (caught.value.reason, caught.value.status_code) == ("context_length_exceeded", 400)


async def test_401_is_auth_and_never_shows_the_key(fake: FakeOpenAI, registry: ModelRegistry) -> None:
    fake.replies = [
        Reply(
            status=401,
            body=api_error(f"Incorrect API key provided: {KEY}.", "invalid_request_error", "invalid_api_key"),
        )
    ]
    spec = spec_for(fake)

    with pytest.raises(ModelAuthError, match="Incorrect API key provided") as caught:
        await registry.provider(spec).complete(request(spec))

    assert (caught.value.reason, caught.value.status_code) == ("unauthorized", 401)
    assert KEY not in str(caught.value) and KEY not in repr(caught.value)


async def test_hanging_server_is_a_transient_timeout_within_the_request_timeout(
    fake: FakeOpenAI, registry: ModelRegistry
) -> None:
    fake.replies = [Reply(hang=True)]
    spec = spec_for(fake, timeout_s=60)  # request.timeout_s wins over the option
    started = time.monotonic()

    with pytest.raises(ModelTransientError, match=r"timed out after 0\.3s") as caught:
        await registry.provider(spec).complete(request(spec, timeout_s=0.3))

    elapsed = time.monotonic() - started
    assert caught.value.reason == "timeout"
    assert 0.25 <= elapsed < 3
    assert len(fake.received) == 1  # the request did reach the server


async def test_connection_refused_is_transient(registry: ModelRegistry) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago, with nobody listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    spec = ModelSpecData(
        provider="openai",
        name="gpt-test",
        options={"base_url": f"http://127.0.0.1:{port}/v1", "api_key_env": KEY_ENV},
    )

    with pytest.raises(ModelTransientError, match="cannot reach the model endpoint") as caught:
        await registry.provider(spec).complete(request(spec))

    assert caught.value.reason == "connection"


async def test_missing_api_key_env_is_a_config_error(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    async with ModelRegistry(get_model_plugin_manager(entrypoints=False)) as models:
        with pytest.raises(ModelConfigError, match=f"{KEY_ENV} is not set") as caught:
            models.provider(spec_for(fake))

    assert caught.value.reason == "missing_api_key"
    assert fake.received == []
