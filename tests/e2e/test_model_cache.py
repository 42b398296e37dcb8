"""Inline agents with distinct model options do not keep HTTP clients open past the provider cache.

Issue 9: 150 inline agents with distinct options grew a runtime from 22 to 172 open file
descriptors, never released. Here a real runtime talks to a local fake OpenAI server over real
HTTP; each distinct ``temperature`` makes a provider with its own client. With
``model_cache.max_providers = 3`` the runtime never holds more than 3 connections to the model
server, and its open file descriptors stay flat, however many distinct options it has seen.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import struct_pb2

from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2, runtime_service_pb2_grpc
from agentrt.testing import FakeModelServer, FakeResponse, RecordedRequest, RuntimeProcess, spawn_runtime
from tests.e2e.conftest import toml_value

KEY_ENV = "E2E_MODEL_CACHE_KEY"
CAP = 3
RUNS = 30


def completion(_request: RecordedRequest) -> FakeResponse:
    return FakeResponse.json_body(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "gpt-test",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
        }
    )


@pytest.fixture
def model_server() -> Iterator[FakeModelServer]:
    with FakeModelServer(default=completion) as server:
        yield server


@pytest.fixture
def runtime(tmp_path: Path, sqlite_url: str, model_server: FakeModelServer) -> Iterator[RuntimeProcess]:
    gpt = {"base_url": f"{model_server.url}/v1", "api_key_env": KEY_ENV, "stream": False}
    path = tmp_path / "cache.toml"
    path.write_text(
        f'db_url = "{sqlite_url}"\n[model_cache]\nmax_providers = {CAP}\n'
        f'[model_profiles.gpt]\nprovider = "openai"\nname = "gpt-test"\noptions = {toml_value(gpt)}\n'
        'inline_options = ["temperature"]\n[inline_agents]\nenabled = true\n'
    )
    env = dict(os.environ, **{KEY_ENV: "sk-e2e-cache-not-real"})
    with spawn_runtime(["--config", str(path), "--listen", "127.0.0.1:0"], cwd=tmp_path, env=env) as process:
        yield process


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def settle(server: FakeModelServer, *, at_most: int, timeout: float = 10.0) -> int:
    """Wait until the runtime holds at most ``at_most`` connections (closing runs in the background)."""
    end = time.monotonic() + timeout
    while server.open_connections > at_most and time.monotonic() < end:
        time.sleep(0.02)
    return server.open_connections


def test_distinct_inline_options_never_hold_more_providers_than_the_cap(
    runtime: RuntimeProcess, model_server: FakeModelServer
) -> None:
    pid = runtime.process.pid
    fds: list[int] = []
    with grpc.insecure_channel(runtime.address) as channel:
        stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channel)
        for n in range(RUNS):
            options = struct_pb2.Struct()
            options.update({"temperature": round(n / 20, 2)})
            agent = run_pb2.AgentSpec(name="mine", model=run_pb2.ModelSpec(profile="gpt", options=options))
            request = runtime_service_pb2.RunAgentRequest(agent=agent, input=f"hi {n}")
            events = list(stub.RunAgent(request, timeout=30))
            assert events[-1].event.WhichOneof("event") == "run_ended", events[-1]
            assert settle(model_server, at_most=CAP) <= CAP
            fds.append(open_fds(pid))

    assert model_server.connections_opened == RUNS  # every run had options of its own: a provider each
    assert len(model_server.requests) == RUNS
    # Flat: past the first CAP runs, no run leaves a descriptor behind.
    assert max(fds[CAP:]) <= fds[CAP - 1] + 2, fds
