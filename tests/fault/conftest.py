"""Fault-suite harness: a refund scenario whose model is a fake OpenAI server outliving the runtime.

The server is agentrt.testing's FakeModelServer; :class:`FakeOpenAI` only decides the answers.

The fake server is in the test process, so it sees every model request across
runtime crashes and restarts: that is how the suite proves the model was never
re-asked for a step whose output was already stored.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agentrt.client import Client, event_type
from agentrt.testing import (
    FakeModelServer,
    FakeResponse,
    RecordedRequest,
    RuntimeProcess,
    ToolHostProcess,
    spawn_tool_host,
)

API_KEY = "test-key-not-secret"

# Step n of the refund scenario: what the model answers.
REFUND_SCRIPT: dict[int, dict[str, Any]] = {
    1: {"tool": "orders.lookup", "arguments": {"order_id": "A100"}},
    2: {"tool": "refund.issue", "arguments": {"order_id": "A100", "amount": 30.0, "reason": "broken"}},
    3: {"text": "Refunded 30.00 for A100."},
}


@dataclass
class FakeOpenAI:
    """A Chat Completions server answering from a script keyed by step (assistant turns + 1)."""

    script: dict[int, dict[str, Any]]
    requests: list[tuple[float, int]] = field(default_factory=list)  # (epoch seconds, step)
    bodies: list[dict[str, Any]] = field(default_factory=list)  # every request body, in order
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        step = 1 + sum(1 for m in body["messages"] if m["role"] == "assistant")
        with self.lock:
            self.requests.append((time.time(), step))
            self.bodies.append(body)
        move = self.script.get(step, {"text": "done"})
        message: dict[str, Any] = {"role": "assistant", "content": move.get("text")}
        finish = "stop"
        if "tool" in move:
            message["tool_calls"] = [
                {
                    "id": f"call_{step}",
                    "type": "function",
                    "function": {
                        "name": move["tool"].replace(".", "__"),
                        # "arguments_json": raw text, as a careless or hostile model may send it.
                        "arguments": move.get("arguments_json") or json.dumps(move["arguments"]),
                    },
                }
            ]
            finish = "tool_calls"
        return {
            "id": f"chatcmpl-{step}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10 * step, "completion_tokens": 5, "total_tokens": 10 * step + 5},
        }

    def steps_asked_after(self, step: int, moment_s: float) -> int:
        with self.lock:
            return sum(1 for t, s in self.requests if s == step and t > moment_s)


@pytest.fixture
def fake_model() -> Iterator[tuple[FakeOpenAI, str]]:
    with serve_fake_openai(REFUND_SCRIPT) as served:
        yield served


@contextlib.contextmanager
def serve_fake_openai(script: dict[int, dict[str, Any]]) -> Iterator[tuple[FakeOpenAI, str]]:
    """A FakeOpenAI answering through agentrt.testing's FakeModelServer; yields it and its base URL."""
    fake = FakeOpenAI(script)

    def respond(request: RecordedRequest) -> FakeResponse:
        if request.headers.get("authorization") != f"Bearer {API_KEY}":
            error = {"error": {"message": "bad API key", "type": "invalid_request_error"}}
            return FakeResponse.json_body(error, status=401)
        return FakeResponse.json_body(fake.answer(request.json()))

    with FakeModelServer(default=respond) as server:
        yield fake, f"{server.url}/v1"


def first_turn_calls(body: dict[str, Any], call: dict[str, Any] | None) -> FakeResponse:
    """A Chat Completions reply: the first turn calls ``call`` ({"tool", "arguments"}) when given,
    every later turn (or a first without a call) answers "done"."""
    message: dict[str, Any] = {"role": "assistant", "content": "done"}
    finish = "stop"
    if call is not None and not any(m["role"] == "assistant" for m in body["messages"]):
        function = {"name": call["tool"].replace(".", "__"), "arguments": json.dumps(call["arguments"])}
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": function}],
        }
        finish = "tool_calls"
    return FakeResponse.json_body(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def refund_host(tmp_path: Path) -> Iterator[ToolHostProcess]:
    with spawn_tool_host(
        tmp_path / "toolhost", plugins=["agentrt.plugins.demo_tools", "agentrt.plugins.fault_tools"]
    ) as host:
        yield host


DEFAULT_TOOLS = ("orders.lookup", "refund.issue", "sleep.wait", "flaky.transient")


def runtime_env(
    *,
    db_url: str,
    tool_host: str,
    model_url: str,
    fault: str = "",
    tools: tuple[str, ...] = DEFAULT_TOOLS,
    **settings: Any,
) -> dict[str, str]:
    """The runtime's whole configuration as AGENTRT_* variables (JSON values)."""
    agent = {
        "instructions": "Refund broken orders.",
        "tools": list(tools),
        "model": {
            "provider": "openai",
            "name": "gpt-test",
            "options": {"base_url": model_url, "api_key_env": "FAKE_KEY"},
        },
        "budgets": {"max_model_steps": 8, "timeout_s": settings.pop("timeout_s", 60)},
        # The shipped refund policy asks a person above 25.00; these scenarios are about faults.
        "approvals": {"options": {"refund_limit": 1000}},
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRT_")}
    env.update(
        FAKE_KEY=API_KEY,
        AGENTRT_DB_URL=db_url,
        AGENTRT_LEASE_TTL_S="1.0",
        AGENTRT_POLL_INTERVAL_S="0.1",
        AGENTRT_GRACE_S="0.5",
        AGENTRT_TOOL_HOSTS=json.dumps([{"name": "local", "address": tool_host}]),
        AGENTRT_AGENTS=json.dumps({"refund": agent}),
    )
    for key, value in settings.items():
        env[f"AGENTRT_{key.upper()}"] = json.dumps(value)
    if fault:
        env["AGENTRT_FAULT_POINT"] = fault
    return env


def start_runtime(tmp_path: Path, env: dict[str, str]) -> RuntimeProcess:
    runtime = RuntimeProcess(["--listen", "127.0.0.1:0"], cwd=tmp_path, env=env)
    runtime.wait_ready(60)
    return runtime


def follow_to_end(address: str, run_id: str, timeout: float = 60.0) -> list[Any]:
    with Client(address) as client:
        events = list(client.stream_events(run_id, follow=True, timeout=timeout))
    assert events and event_type(events[-1]) == "run.ended", [event_type(e) for e in events]
    return events


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from tests.fault.test_crash_points import CRASH_POINTS, DUPLICATE_EFFECTS

    if DUPLICATE_EFFECTS:
        terminalreporter.write_line(
            f"fault suite: {len(CRASH_POINTS)} runtime crash points: {', '.join(CRASH_POINTS)}; "
            f"duplicate side effects observed: {sum(DUPLICATE_EFFECTS)} "
            f"over {len(DUPLICATE_EFFECTS)} scenarios"
        )
