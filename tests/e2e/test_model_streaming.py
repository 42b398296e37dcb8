"""Streaming model answers through the whole stack: live deltas, broken streams, token and cost budgets."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import json_format

from agentrt.client import Client
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import (
    FakeModelServer,
    FakeResponse,
    RuntimeProcess,
    ToolHostProcess,
    spawn_runtime,
    sse_event,
)

KEY_ENV = "E2E_FAKE_OPENAI_KEY"


def chunk(text: str = "", *, finish: str | None = None, usage: dict[str, int] | None = None) -> bytes:
    body: dict[str, object] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "gpt-test",
        "choices": [{"index": 0, "delta": {"content": text} if text else {}, "finish_reason": finish}],
    }
    if usage is not None:
        body["choices"] = []
        body["usage"] = usage
    return sse_event(body)


def answer(
    words: list[str],
    *,
    usage: dict[str, int] | None = None,
    pause_after: int | None = None,
    drop_after: int | None = None,
) -> FakeResponse:
    events = [chunk(w) for w in words] + [chunk(finish="stop")]
    events.append(chunk(usage=usage or {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28}))
    events.append(sse_event("[DONE]"))
    return FakeResponse.event_stream(*events, pause_after=pause_after, drop_after=drop_after)


@pytest.fixture
def fake_server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as server:
        yield server


@pytest.fixture
def streaming_runtime(
    tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str, fake_server: FakeModelServer
) -> Iterator[RuntimeProcess]:
    model = (
        f'{{ provider = "openai", name = "gpt-test", options = {{ base_url = "{fake_server.url}/v1", '
        f'api_key_env = "{KEY_ENV}" }} }}'
    )
    text = (
        f'db_url = "{sqlite_url}"\nretry_base_s = 0.05\n'
        f'[[tool_hosts]]\nname = "local"\naddress = "{tool_host.address}"\n'
        "[prices.gpt-test]\ninput_per_mtok = 50000.0\noutput_per_mtok = 50000.0\n"
        f"[agents.talker]\ntools = []\nmodel = {model}\n"
        f'[agents.thrifty]\ntools = ["orders.lookup"]\nmodel = {model}\n'
        "budgets = { max_output_tokens = 5 }\n"
        f'[agents.frugal]\ntools = ["orders.lookup"]\nmodel = {model}\n'
        "budgets = { max_cost_usd = 0.5 }\n"
    )
    path = tmp_path / "stream.toml"
    path.write_text(text)
    env = dict(os.environ, **{KEY_ENV: "sk-test-not-real"})
    with spawn_runtime(["--config", str(path), "--listen", "127.0.0.1:0"], cwd=tmp_path, env=env) as runtime:
        yield runtime


def test_a_client_sees_the_first_delta_before_the_model_finishes(
    streaming_runtime: RuntimeProcess, fake_server: FakeModelServer
) -> None:
    paused = answer(["Your ", "refund ", "is ", "on ", "its ", "way."], pause_after=2)
    fake_server.enqueue(paused)
    seen_before_release: list[str] = []
    events: list[run_pb2.RunEvent] = []
    with Client(streaming_runtime.address) as client:
        for event in client.run_agent("talker", "where is my refund?", timeout=60):
            events.append(event)
            if event.HasField("model_text_delta") and not paused.gate.is_set():
                seen_before_release.append(event.model_text_delta.text)
                assert not paused.finished.is_set()  # the model is still mid-answer
                threading.Timer(0.2, paused.gate.set).start()
    assert seen_before_release and seen_before_release[0] == "Your "
    deltas = "".join(e.model_text_delta.text for e in events if e.HasField("model_text_delta"))
    completed = next(e.model_completed for e in events if e.HasField("model_completed"))
    assert deltas == completed.text == "Your refund is on its way."
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED


def test_a_broken_stream_is_retried_as_a_whole_step_and_its_deltas_are_superseded(
    streaming_runtime: RuntimeProcess, fake_server: FakeModelServer
) -> None:
    fake_server.enqueue(answer(["Half ", "an ", "answer"], drop_after=2))
    fake_server.enqueue(answer(["A ", "whole ", "answer."]))
    with Client(streaming_runtime.address) as client:
        events = list(client.run_agent("talker", "answer me", timeout=60))
    deltas = [e.model_text_delta for e in events if e.HasField("model_text_delta")]
    markers = [d for d in deltas if d.superseded]
    assert len(markers) == 1 and (markers[0].step, markers[0].attempt) == (1, 1)
    kept = "".join(d.text for d in deltas if d.attempt == 2 and not d.superseded)
    dropped = "".join(d.text for d in deltas if d.attempt == 1 and not d.superseded)
    assert dropped.startswith("Half ") and kept == "A whole answer."
    persisted = [e for e in events if e.seq]
    retry = next(e.retry_scheduled for e in persisted if e.HasField("retry_scheduled"))
    assert retry.call_id == "" and retry.step == 1 and "stream_interrupted" in retry.reason
    completed = next(e.model_completed for e in persisted if e.HasField("model_completed"))
    assert completed.text == "A whole answer." and len(fake_server.requests) == 2
    assert persisted[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED


def lookup_call(usage: dict[str, int]) -> FakeResponse:
    """A streamed tool call whose arguments arrive in two fragments."""

    def call_chunk(arguments: str, first: bool) -> bytes:
        call: dict[str, object] = {"index": 0, "function": {"arguments": arguments}}
        if first:
            call.update(id="call_1", type="function")
            call["function"] = {"name": "orders__lookup", "arguments": arguments}
        body = {
            "id": "c",
            "object": "chat.completion.chunk",
            "model": "gpt-test",
            "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}],
        }
        return sse_event(body)

    return FakeResponse.event_stream(
        call_chunk('{"order_', True),
        call_chunk('id": "A100"}', False),
        chunk(finish="tool_calls"),
        chunk(usage=usage),
        sse_event("[DONE]"),
    )


def test_stream_usage_feeds_the_token_and_cost_budgets(
    streaming_runtime: RuntimeProcess, fake_server: FakeModelServer
) -> None:
    # One model step each: its usage exhausts the budget, so the step after the tool never starts.
    fake_server.enqueue(lookup_call({"prompt_tokens": 40, "completion_tokens": 6, "total_tokens": 46}))
    fake_server.enqueue(lookup_call({"prompt_tokens": 10000, "completion_tokens": 6, "total_tokens": 10006}))
    with Client(streaming_runtime.address) as client:
        thrifty = [e for e in client.run_agent("thrifty", "hi", timeout=60) if e.seq]
        frugal = [e for e in client.run_agent("frugal", "hi", timeout=60) if e.seq]
        run = client.get_run(frugal[0].run_id)
    assert thrifty[-1].run_ended.phase == run_pb2.RUN_PHASE_FAILED
    assert thrifty[-1].run_ended.reason == "budget_exhausted:output_tokens"
    started = next(e.tool_started for e in thrifty if e.HasField("tool_started"))
    assert started.tool == "orders.lookup" and json.loads(started.arguments_json) == {"order_id": "A100"}
    assert json_format.MessageToDict(started.arguments) == {"order_id": "A100"}  # the structured twin
    assert frugal[-1].run_ended.reason == "budget_exhausted:cost"
    assert run.usage.cost_micros == (10000 + 6) * 50000  # dollars per Mtok = micro-dollars per token, exact
    assert run.usage.input_tokens == 10000 and run.usage.output_tokens == 6
    assert len(fake_server.requests) == 2
