"""The reproducibility record through the whole stack (S004 §12, issue 11).

A run against an OpenAI-compatible model (agentrt.testing's FakeModelServer) and a real tool host:
each model.completed shows the sampling options its request carried, the model, the provider's
response id and request id and the call's latency; each tool result shows when its call was
sent and answered and which tool host served it. GetRun's events and StreamRunEvents show them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import json_format

from agentrt.client import Client
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import FakeModelServer, FakeResponse, RuntimeProcess, ToolHostProcess, spawn_runtime

KEY_ENV = "E2E_FAKE_OPENAI_KEY"


def completion(n: int, message: dict[str, object], finish: str) -> FakeResponse:
    return FakeResponse.json_body(
        {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "model": "gpt-test",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5},
        },
        headers={"x-request-id": f"req_{n}"},
    )


@pytest.fixture
def fake_server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as server:
        yield server


@pytest.fixture
def runtime(
    tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str, fake_server: FakeModelServer
) -> Iterator[RuntimeProcess]:
    text = (
        f'db_url = "{sqlite_url}"\n'
        f'[[tool_hosts]]\nname = "local"\naddress = "{tool_host.address}"\n'
        "[model_profiles.gpt]\n"
        'provider = "openai"\nname = "gpt-test"\n'
        f'options = {{ base_url = "{fake_server.url}/v1", api_key_env = "{KEY_ENV}", temperature = 0.3, '
        "max_tokens = 256 }\n"
        '[agents.support]\ntools = ["orders.lookup"]\n'
        'model = { profile = "gpt", options = { stream = false } }\n'
    )
    path = tmp_path / "repro.toml"
    path.write_text(text)
    env = dict(os.environ, **{KEY_ENV: "sk-test-not-real"})
    with spawn_runtime(["--config", str(path), "--listen", "127.0.0.1:0"], cwd=tmp_path, env=env) as process:
        yield process


def test_model_and_tool_steps_record_what_shaped_them_who_answered_and_when(
    runtime: RuntimeProcess, fake_server: FakeModelServer
) -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "orders__lookup", "arguments": '{"order_id": "A100"}'},
    }
    fake_server.enqueue(
        completion(1, {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"),
        completion(2, {"role": "assistant", "content": "A100 has shipped."}, "stop"),
    )
    with Client(runtime.address) as client:
        run_id = client.start_run("support", "where is A100?").run_id
        events = [e for e in client.stream_events(run_id, follow=True, timeout=60) if e.seq]
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED

    models = [e.model_completed for e in events if e.HasField("model_completed")]
    assert [m.response_id for m in models] == ["chatcmpl-1", "chatcmpl-2"]
    assert [m.request_id for m in models] == ["req_1", "req_2"]
    for model in models:
        assert model.model == "openai/gpt-test"
        assert json_format.MessageToDict(model.sampling) == {"temperature": 0.3, "max_tokens": 256}
        assert 0 < model.latency.ToMilliseconds() < 30_000

    (tool,) = [e.tool_completed for e in events if e.HasField("tool_completed")]
    assert tool.host == "local"
    sent, answered = tool.start_time.ToMilliseconds(), tool.end_time.ToMilliseconds()
    started_event = next(e for e in events if e.HasField("tool_started"))
    assert started_event.time.ToMilliseconds() <= sent <= answered
