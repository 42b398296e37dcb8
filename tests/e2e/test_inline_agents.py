"""Inline agents name server-side model profiles only, within the operator's lists (R10.2, R5.7).

Real runtime and tool host processes and a local fake OpenAI server: a refused inline agent
writes nothing and sends nothing to any model endpoint; a profile's endpoint and key source
never enter a run's snapshot, its events or the database.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from google.rpc import error_details_pb2  # type: ignore[import-untyped]

from agentrt.client import Client, RPCError
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import FakeModelServer, FakeResponse, RuntimeProcess, ToolHostProcess, spawn_runtime
from tests.e2e.conftest import toml_value

PROJECT_ROOT = Path(__file__).resolve().parents[2]
KEY_ENV = "E2E_INLINE_PROFILE_KEY"
KEY = "sk-e2e-profile-key-not-real-7f3a"
ECHO_STEPS = [
    {"text": "echoing", "tool_calls": [{"tool": "noop.echo", "arguments": {"said": "{input}"}}]},
    {"text": "Echoed {input}."},
]


def options(values: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(values)
    return struct


def inline(
    *,
    profile: str = "scripted",
    opts: dict[str, Any] | None = None,
    tools: tuple[str, ...] = ("noop.echo",),
    **model: str,
) -> run_pb2.AgentSpec:
    spec = run_pb2.ModelSpec(
        profile=profile, options=options({"steps": ECHO_STEPS} if opts is None else opts), **model
    )
    return run_pb2.AgentSpec(name="mine", instructions="inline test agent", model=spec, tools=list(tools))


def completion(text: str) -> FakeResponse:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-test",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }
    return FakeResponse.json_body(body)


@pytest.fixture
def model_server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as server:
        yield server


@pytest.fixture
def attacker() -> Iterator[FakeModelServer]:
    """Where a caller would like the runtime to send the server's key."""
    with FakeModelServer() as server:
        yield server


def start(tmp_path: Path, text: str) -> Iterator[RuntimeProcess]:
    path = tmp_path / "inline.toml"
    path.write_text(text)
    env = dict(os.environ, **{KEY_ENV: KEY})
    with spawn_runtime(["--config", str(path), "--listen", "127.0.0.1:0"], cwd=tmp_path, env=env) as runtime:
        yield runtime


def base_toml(sqlite_url: str, tool_host: ToolHostProcess, model_server: FakeModelServer) -> str:
    gpt = {"base_url": f"{model_server.url}/v1", "api_key_env": KEY_ENV, "stream": False}
    return (
        f'db_url = "{sqlite_url}"\n[[tool_hosts]]\nname = "local"\naddress = "{tool_host.address}"\n'
        '[model_profiles.scripted]\nprovider = "scripted"\ninline_options = ["steps"]\n'
        f'[model_profiles.gpt]\nprovider = "openai"\nname = "gpt-test"\noptions = {toml_value(gpt)}\n'
        'inline_options = ["temperature"]\n'
        '[agents.talker]\ntools = []\nmodel = { profile = "gpt", options = { temperature = 0.2 } }\n'
    )


@pytest.fixture
def closed_runtime(
    tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str, model_server: FakeModelServer
) -> Iterator[RuntimeProcess]:
    yield from start(tmp_path, base_toml(sqlite_url, tool_host, model_server))


@pytest.fixture
def open_runtime(
    tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str, model_server: FakeModelServer
) -> Iterator[RuntimeProcess]:
    text = base_toml(sqlite_url, tool_host, model_server)
    text += '[inline_agents]\nenabled = true\ntools = ["noop.echo", "orders.lookup"]\n'
    yield from start(tmp_path, text)


def refusal(client: Client, agent: run_pb2.AgentSpec) -> RPCError:
    with pytest.raises(RPCError) as info:
        client.start_run(input="hi", agent=agent)
    with pytest.raises(RPCError) as streamed:
        list(client.run_agent(input="hi", agent=agent, timeout=30))
    assert (streamed.value.code, streamed.value.reason) == (info.value.code, info.value.reason)
    return info.value


def bad_field(error: RPCError) -> str:
    bad = error.detail(error_details_pb2.BadRequest)
    assert bad is not None
    return str(bad.field_violations[0].field)


def test_inline_agents_are_off_unless_the_server_enables_them(closed_runtime: RuntimeProcess) -> None:
    with Client(closed_runtime.address) as client:
        error = refusal(client, inline())
        assert error.code == grpc.StatusCode.PERMISSION_DENIED and error.reason == "INLINE_AGENTS_DISABLED"
        assert len(client.list_runs().runs) == 0


def test_an_enabled_inline_agent_on_a_scripted_profile_runs(
    open_runtime: RuntimeProcess, model_server: FakeModelServer
) -> None:
    with Client(open_runtime.address) as client:
        events = [e for e in client.run_agent(input="ping", agent=inline(), timeout=60) if e.seq]
        runs = client.list_runs().runs
    assert [e.tool_completed.tool for e in events if e.HasField("tool_completed")] == ["noop.echo"]
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
    assert next(e.run_completed for e in events if e.HasField("run_completed")).output == "Echoed ping."
    assert [r.agent_name for r in runs] == ["mine"]
    assert model_server.requests == []


def test_a_caller_can_never_choose_an_endpoint_a_key_source_headers_or_a_provider(
    open_runtime: RuntimeProcess,
    tool_host: ToolHostProcess,
    attacker: FakeModelServer,
    model_server: FakeModelServer,
    tmp_path: Path,
) -> None:
    secret_file = tmp_path / "server-secret.key"
    secret_file.write_text("sk-file-secret-not-real\n")
    steps = {"steps": ECHO_STEPS}
    # (agent, the field refused, a value the answer must not repeat)
    cases: list[tuple[run_pb2.AgentSpec, str, str | None]] = [
        (
            inline(opts={**steps, "base_url": f"{attacker.url}/v1"}),
            "agent.model.options.base_url",
            attacker.url,
        ),
        (
            inline(opts={**steps, "api_key_file": str(secret_file)}),
            "agent.model.options.api_key_file",
            "server-secret",
        ),
        (
            inline(opts={**steps, "api_key_file": str(tmp_path / "missing.key")}),
            "agent.model.options.api_key_file",
            "missing.key",
        ),
        (inline(opts={**steps, "api_key_env": KEY_ENV}), "agent.model.options.api_key_env", KEY_ENV),
        (
            inline(opts={**steps, "headers": {"X-Exfil": attacker.url}}),
            "agent.model.options.headers",
            attacker.url,
        ),
        (
            inline(profile="gpt", opts={"base_url": f"{attacker.url}/v1", "api_key_env": KEY_ENV}),
            "agent.model.options.api_key_env",
            attacker.url,
        ),
        (inline(provider="openai"), "agent.model.provider", "openai"),
        (inline(name="gpt-4o"), "agent.model.name", "gpt-4o"),
        (inline(profile=""), "agent.model.profile", None),
    ]
    messages = []
    with Client(open_runtime.address) as client:
        for agent, field, value in cases:
            error = refusal(client, agent)
            assert error.code == grpc.StatusCode.INVALID_ARGUMENT, (field, error)
            assert bad_field(error) == field
            if value is not None:
                assert value not in error.message and value not in str(error.details), (field, error.message)
            assert KEY not in str(error.details)
            messages.append(error.message)
        # Whether a server file exists is not told: both answers are the same.
        assert messages[1] == messages[2]
        assert (
            refusal(client, inline(opts={**steps, "base_url": "http://x.example"})).reason
            == "OPTION_NOT_ALLOWED"
        )
        assert refusal(client, inline(provider="openai")).reason == "FIELD_NOT_ALLOWED"
        assert len(client.list_runs().runs) == 0
    assert attacker.requests == [] and model_server.requests == []
    logs = open_runtime.stderr_text()
    assert KEY not in logs and attacker.url not in logs and "sk-file-secret" not in logs


def test_an_inline_agents_tools_lie_within_the_operators_list(
    open_runtime: RuntimeProcess, tool_host: ToolHostProcess
) -> None:
    with Client(open_runtime.address) as client:
        error = refusal(client, inline(tools=("noop.echo", "refund.issue")))
        assert error.code == grpc.StatusCode.PERMISSION_DENIED and error.reason == "TOOL_NOT_ALLOWED"
        assert error.error_info is not None and dict(error.error_info.metadata) == {"tool": "refund.issue"}
        error = refusal(
            client,
            run_pb2.AgentSpec(name="mine", model=run_pb2.ModelSpec(profile="scripted"), handoffs=["talker"]),
        )
        assert error.code == grpc.StatusCode.PERMISSION_DENIED and error.reason == "AGENT_NOT_ALLOWED"
        assert len(client.list_runs().runs) == 0


def test_an_inline_agent_on_an_openai_profile_reaches_only_the_profiles_endpoint(
    open_runtime: RuntimeProcess, model_server: FakeModelServer
) -> None:
    model_server.enqueue(completion("Hello from the profile."))
    agent = inline(profile="gpt", opts={"temperature": 0.3}, tools=())
    with Client(open_runtime.address) as client:
        events = [e for e in client.run_agent(input="hi", agent=agent, timeout=60) if e.seq]
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
    (request,) = model_server.requests
    assert request.json()["model"] == "gpt-test" and request.json()["temperature"] == 0.3
    assert request.headers["authorization"] == f"Bearer {KEY}"


def test_a_profiles_endpoint_and_key_source_stay_out_of_snapshots_events_and_the_database(
    open_runtime: RuntimeProcess, model_server: FakeModelServer, sqlite_url: str
) -> None:
    model_server.enqueue(completion("Hi there."))
    with Client(open_runtime.address) as client:
        run_id = client.start_run("talker", "hello").run_id
        events = list(client.stream_events(run_id, follow=True, timeout=60))
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
    (request,) = model_server.requests
    assert request.json()["temperature"] == 0.2  # the agent's own option on top of the profile's
    assert request.headers["authorization"] == f"Bearer {KEY}"
    address = model_server.url.removeprefix("http://")
    shown = "".join(str(e) for e in events)
    for secret in (address, KEY_ENV, KEY):
        assert secret not in shown
    open_runtime.stop()
    assert KEY not in open_runtime.stderr_text()
    db = Path(sqlite_url.removeprefix("sqlite:///"))
    stored = b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))
    assert b"talker" in stored and b'"profile":"gpt"' in stored
    for secret in (address, KEY_ENV, KEY):
        assert secret.encode() not in stored, secret


def test_profile_and_allow_list_mistakes_stop_the_server_at_start(
    tmp_path: Path, tool_host: ToolHostProcess
) -> None:
    db = tmp_path / "never.sqlite"
    head = f'db_url = "sqlite:///{db}"\n[[tool_hosts]]\nname = "h"\naddress = "{tool_host.address}"\n'
    cases = {
        "unserved.toml": (head + '[inline_agents]\nenabled = true\ntools = ["nope.tool"]\n', "nope.tool"),
        "openprofile.toml": (
            head + '[model_profiles.p]\nprovider = "scripted"\ninline_options = ["steps", "base_url"]\n',
            "inline_options may not list ['base_url']",
        ),
        "both.toml": (
            head + '[model_profiles.p]\nprovider = "scripted"\n'
            '[agents.a]\nmodel = { profile = "p", provider = "openai" }\n',
            "model.profile gives the provider",
        ),
        "unknownprofile.toml": (head + '[agents.a]\nmodel = { profile = "nope" }\n', "unknown model profile"),
        "nokey.toml": (
            head
            + '[model_profiles.p]\nprovider = "openai"\noptions = { api_key_env = "E2E_UNSET_KEY_VAR" }\n'
            "[inline_agents]\nenabled = true\n",
            "model profile 'p' is unusable",
        ),
    }
    for name, (text, expected) in cases.items():
        (tmp_path / name).write_text(text)
        done = subprocess.run(
            [sys.executable, "-m", "agentrt.server", "--config", str(tmp_path / name)],
            cwd=tmp_path,
            env=dict(os.environ, PYTHONPATH=str(PROJECT_ROOT)),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, (name, done.stderr)
        assert expected in done.stderr, (name, done.stderr)
    assert not db.exists()
