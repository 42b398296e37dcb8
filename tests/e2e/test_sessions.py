"""Sessions (R8.3): a turn sees the session's history; one active run per session, by policy."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from agentrt.client import Client, RPCError, event_type
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import FakeModelServer, RuntimeProcess, ToolHostProcess, spawn_runtime
from tests.e2e.conftest import agent_toml
from tests.e2e.test_model_streaming import answer

KEY_ENV = "E2E_SESSION_KEY"


@pytest.fixture
def fake_server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as server:
        yield server


@pytest.fixture
def runtime(
    tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str, fake_server: FakeModelServer
) -> Iterator[RuntimeProcess]:
    options = f'base_url = "{fake_server.url}/v1", api_key_env = "{KEY_ENV}"'
    model = f'{{ provider = "openai", name = "gpt-test", options = {{ {options} }} }}'
    nap = {"text": "napping", "tool_calls": [{"tool": "sleep.wait", "arguments": {"seconds": 30}}]}
    text = (
        f'db_url = "{sqlite_url}"\npoll_interval_s = 0.2\n'
        f'[[tool_hosts]]\nname = "local"\naddress = "{tool_host.address}"\n'
        f"[agents.chat]\ntools = []\nmodel = {model}\n"
    )
    text += agent_toml("sleeper", steps=[nap, {"text": "woke"}], tools=["sleep.wait"], budgets={})
    text += agent_toml("quick", steps=[{"text": "{input} - done"}], tools=[], budgets={})
    path = tmp_path / "sessions.toml"
    path.write_text(text)
    env = dict(os.environ, **{KEY_ENV: "sk-test"})
    with spawn_runtime(["--config", str(path), "--listen", "127.0.0.1:0"], cwd=tmp_path, env=env) as process:
        yield process


def test_a_second_turn_sees_the_first_turns_history(
    runtime: RuntimeProcess, fake_server: FakeModelServer
) -> None:
    fake_server.enqueue(answer(["Noted: ", "A100."]))
    fake_server.enqueue(answer(["It was ", "A100."]))
    with Client(runtime.address) as client:
        first = [
            e for e in client.run_agent("chat", "My order is A100.", session_id="s1", timeout=60) if e.seq
        ]
        second = [
            e for e in client.run_agent("chat", "What was my order?", session_id="s1", timeout=60) if e.seq
        ]
    assert first[-1].run_ended.phase == second[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
    history = second[0].run_started.session_history
    assert [(t.run_id, t.input, t.output) for t in history] == [
        (first[0].run_id, "My order is A100.", "Noted: A100.")
    ]
    messages = fake_server.requests[1].json()["messages"]
    said = [(m["role"], m.get("content")) for m in messages]
    assert said[-3:] == [
        ("user", "My order is A100."),
        ("assistant", "Noted: A100."),
        ("user", "What was my order?"),
    ]
    assert len(fake_server.requests[0].json()["messages"]) == 1  # the first turn had no history


def test_one_active_run_per_session_reject_enqueue_interrupt(runtime: RuntimeProcess) -> None:
    with Client(runtime.address) as client:
        busy = client.start_run("sleeper", "nap", session_id="s2")
        for event in client.stream_events(busy.run_id, follow=True, timeout=30):
            if event_type(event) == "tool.started":
                break
        with pytest.raises(RPCError) as info:
            client.start_run("quick", "hello", session_id="s2")
        assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION and info.value.reason == "SESSION_BUSY"
        assert info.value.metadata["active_run_id"] == busy.run_id
        assert len(client.list_runs(session_id="s2").runs) == 1  # the refusal wrote nothing

        queued = client.start_run("quick", "second", session_id="s2", session_policy="enqueue")
        assert queued.phase == run_pb2.RUN_PHASE_QUEUED
        assert client.get_run(queued.run_id).phase == run_pb2.RUN_PHASE_QUEUED  # waits behind the nap

        latest = client.start_run("quick", "third", session_id="s2", session_policy="interrupt")
        ended = {}
        for run_id in (busy.run_id, queued.run_id, latest.run_id):
            events = [e for e in client.stream_events(run_id, follow=True, timeout=60) if e.seq]
            ended[run_id] = events
    nap = ended[busy.run_id][-1].run_ended
    assert nap.phase == run_pb2.RUN_PHASE_CANCELLED and nap.reason == "interrupted by a new turn"
    second, third = ended[queued.run_id], ended[latest.run_id]
    assert second[-1].run_ended.phase == third[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
    # Turns ran one at a time, in the order they were accepted.
    assert second[1].time.ToMilliseconds() >= ended[busy.run_id][-1].time.ToMilliseconds()
    assert third[1].time.ToMilliseconds() >= second[-1].time.ToMilliseconds()
    # The third turn was accepted while the second waited, so its history snapshot has no output of it yet.
    assert [t.input for t in third[0].run_started.session_history] == []
