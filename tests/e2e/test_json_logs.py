"""JSON logs of a real runtime and a real tool host (issue 17, "A logs test").

Both run as processes with ``--log-format json``, a bearer token, call grants and a model API
key. One run times out a model call, retries it, calls a tool, retries a failing tool, and
completes. Every stderr line of both processes is JSON; the runtime's lines of that run, picked
by ``run_id``, tell its story in order; the host's lines of its calls carry the run's ids; and
neither process ever writes the token, a grant the runtime signed, or the API key.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentrt.client import Client
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import FakeModelServer, FakeResponse, ToolHostProcess, spawn_runtime, spawn_tool_host
from agentrt.toolhost.security import GrantSigner, write_signing_key
from tests.e2e.conftest import agent_toml, toml_value

KEY_ENV = "E2E_LOGS_OPENAI_KEY"
API_KEY = f"sk-logs-{uuid.uuid4().hex}"
TOKEN = f"tok-logs-{uuid.uuid4().hex}"
TENANT = "acme"


def chat(body: dict[str, Any], *, text: str = "", call: dict[str, Any] | None = None) -> FakeResponse:
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if call is not None:
        function = {"name": call["tool"].replace(".", "__"), "arguments": json.dumps(call["arguments"])}
        message["tool_calls"] = [{"id": call["id"], "type": "function", "function": function}]
    return FakeResponse.json_body(
        {
            "id": f"chatcmpl-{uuid.uuid4().hex[:8]}",
            "object": "chat.completion",
            "model": "gpt-test",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if call else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
    )


LOOKUP = {"id": "call_lookup", "tool": "orders.lookup", "arguments": {"order_id": "A100"}}
FLAKY = {"id": "call_flaky", "tool": "flaky.transient", "arguments": {"note": "once more"}}


def scripted(request: Any) -> FakeResponse:
    """Turn by turn: look the order up, call the flaky tool, then answer."""
    body = request.json()
    tool_turns = sum(1 for m in body["messages"] if m["role"] == "tool")
    if tool_turns == 0:
        return chat(body, call=LOOKUP)
    if tool_turns == 1:
        return chat(body, call=FLAKY)
    return chat(body, text="Order A100 is on its way.")


@pytest.fixture
def model_server() -> Iterator[FakeModelServer]:
    # The first answer never comes: the attempt times out, and the step is retried.
    hang = FakeResponse.json_body({"never": "sent"}).with_pause(0)
    with FakeModelServer(hang, default=scripted) as server:
        yield server


def lines_of(stderr: str, process: str) -> list[dict[str, Any]]:
    parsed = []
    for text in stderr.splitlines():
        if not text.strip():
            continue
        if text.startswith("agentrt-counters "):
            continue  # the shutdown counter line (not a log line; issue 17's metrics remove it)
        try:
            line = json.loads(text)
        except ValueError:
            pytest.fail(f"{process} wrote a stderr line that is not JSON: {text!r}")
        assert isinstance(line, dict), text
        for key in ("ts", "level", "logger", "message"):
            assert key in line, f"{process} line without {key}: {text}"
        parsed.append(line)
    return parsed


def sent_grants(signing_key: Path, events: list[Any], started_s: float, ended_s: float) -> set[str]:
    """Every grant the runtime may have signed for the run's InvokeTool calls.

    Ed25519 signatures are deterministic, so the grant of each attempt is rebuilt exactly from
    its claims, for every second the run was alive as its ``iat``.
    """
    grants: set[str] = set()
    for event in events:
        if event.WhichOneof("event") != "tool_started":
            continue
        started = event.tool_started
        for iat in range(int(started_s) - 1, int(ended_s) + 2):
            signer = GrantSigner(key_file=signing_key, ttl_s=60.0, clock=lambda iat=iat: float(iat))
            grants.add(
                signer.sign(
                    tenant=TENANT,
                    run_id=event.run_id,
                    call_id=started.call_id,
                    idempotency_key=started.idempotency_key,
                    fencing_token=1,
                    tool=started.tool,
                    arguments_json=started.arguments_json,
                )
            )
    return grants


def test_json_logs_tell_the_runs_story_and_never_hold_a_secret(
    tmp_path: Path, sqlite_url: str, model_server: FakeModelServer
) -> None:
    signing_key = tmp_path / "grant.key"
    public = tmp_path / "grant.pub"
    public.write_bytes(GrantSigner(key=write_signing_key(signing_key)).public_key_pem)
    (tmp_path / "tokens.toml").write_text(
        f'[[tokens]]\nsha256 = "{hashlib.sha256(TOKEN.encode()).hexdigest()}"\nsubject = "alice"\n'
        f'tenant = "{TENANT}"\nroles = ["runner", "operator"]\n'
    )
    gpt = {"base_url": f"{model_server.url}/v1", "api_key_env": KEY_ENV, "stream": False}
    # Per-logger levels: the host's servicer says one DEBUG line per call.
    host_args = ["--log-format", "json", "--log-level", "INFO,agentrt.toolhost._server=DEBUG"]
    plugins = ["agentrt.plugins.demo_tools", "agentrt.plugins.fault_tools"]
    with spawn_tool_host(
        tmp_path / "toolhost", plugins=plugins, grant_keys=public, extra_args=host_args
    ) as host:
        config = tmp_path / "agentrt.toml"
        config.write_text(
            f'db_url = "{sqlite_url}"\nlease_ttl_s = 5.0\npoll_interval_s = 0.2\ngrace_s = 1.0\n'
            "model_timeout_s = 1.0\ntool_attempts = 2\nretry_base_s = 0.05\nretry_cap_s = 0.1\n"
            f'[[tool_hosts]]\nname = "local"\naddress = "{host.address}"\n'
            f'[auth]\ntokens_file = "{tmp_path / "tokens.toml"}"\n'
            f'[grants]\nsigning_key_file = "{signing_key}"\n'
            '[logging]\nlevels = { "agentrt.run" = "INFO" }\n'
            f'[model_profiles.gpt]\nprovider = "openai"\nname = "gpt-test"\noptions = {toml_value(gpt)}\n'
            '[agents.shop]\ninstructions = "help"\ntools = ["orders.lookup", "flaky.transient"]\n'
            'model = { profile = "gpt" }\nbudgets = { timeout_s = 60 }\n'
        )
        env = {**os.environ, KEY_ENV: API_KEY}
        # Root at INFO: every library's lines (httpx, grpc) are held to the same rules.
        args = [
            "--config",
            str(config),
            "--listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
            "--log-level",
            "INFO",
        ]
        started_s = time.time()
        with spawn_runtime(args, cwd=tmp_path, env=env) as runtime:
            with Client(runtime.address, token=TOKEN, timeout=60) as client:
                events = [e for e in client.run_agent("shop", "Where is order A100?", timeout=60) if e.seq]
                assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED, events[-1]
                run_id = events[0].run_id
            ended_s = time.time()
            runtime.stop()
            runtime_lines = lines_of(runtime.stderr_text(), "the runtime")
        host.terminate()
        host.wait()
        host_lines = lines_of(host.stderr_text(), "the tool host")
    # The model really got the key, and the host really got grants: there was something to leak.
    assert model_server.requests[0].headers["authorization"] == f"Bearer {API_KEY}"
    grants = sent_grants(signing_key, events, started_s, ended_s)

    story = [
        line for line in runtime_lines if line.get("run_id") == run_id and line["logger"] == "agentrt.run"
    ]
    assert all(line["tenant"] == TENANT and line["level"] == "INFO" for line in story), story
    told = [
        (line.get("event") or line.get("decision"), line.get("to_phase"), line.get("call_id"))
        for line in story
    ]
    assert told == [
        ("run.started", "QUEUED", None),
        ("step.started", "MODEL_STEP", None),
        ("timeout", None, None),  # the first model attempt never answered...
        ("retry.scheduled", "MODEL_STEP", None),  # ...so the step is asked again, as a whole
        ("model.completed", "TOOL_STEP", None),
        ("tool.started", "TOOL_STEP", "call_lookup"),
        ("tool.completed", "TOOL_STEP", "call_lookup"),
        ("step.started", "MODEL_STEP", None),
        ("model.completed", "TOOL_STEP", None),
        ("tool.started", "TOOL_STEP", "call_flaky"),
        ("retry.scheduled", "RETRY_WAIT", "call_flaky"),  # flaky.transient failed once...
        ("tool.started", "TOOL_STEP", "call_flaky"),
        ("tool.failed", "TOOL_STEP", "call_flaky"),  # ...and again: its attempts are spent
        ("step.started", "MODEL_STEP", None),
        ("run.completed", "COMPLETED", None),
    ], story
    assert story[2]["message"] == "model step 1 attempt 1 timed out" and story[2]["layer"] == "call"
    assert story[-1]["message"] == "run.completed (MODEL_STEP -> COMPLETED)"
    assert [line["ts"] for line in story] == sorted(line["ts"] for line in story)

    calls = [line for line in host_lines if line.get("run_id") == run_id]
    assert [(line["level"], line["call_id"], line["tenant"]) for line in calls] == [
        ("DEBUG", "call_lookup", TENANT),
        ("DEBUG", "call_flaky", TENANT),
        ("DEBUG", "call_flaky", TENANT),
    ], calls

    secrets = {"the bearer token": TOKEN, "the API key": API_KEY}
    header = next(iter(grants)).split(".")[0]  # every grant of this key starts with it
    for process, lines in (("runtime", runtime_lines), ("tool host", host_lines)):
        for line in lines:
            text = json.dumps(line)
            for name, secret in secrets.items():
                assert secret not in text, f"{name} in a {process} line: {text}"
            assert not any(grant in text for grant in grants), f"a grant in a {process} line: {text}"
            assert header not in text, f"a grant's header in a {process} line: {text}"


def test_a_tool_host_the_runtime_spawns_logs_json_like_it(tmp_path: Path, sqlite_url: str) -> None:
    steps = [
        {"text": "", "tool_calls": [{"tool": "orders.lookup", "arguments": {"order_id": "A100"}}]},
        {"text": "found"},
    ]
    config = tmp_path / "agentrt.toml"
    config.write_text(
        f'db_url = "{sqlite_url}"\ngrace_s = 1.0\ndata_dir = "{tmp_path / "data"}"\n'
        '[[tool_hosts]]\nname = "local"\nspawn = true\nplugins = ["agentrt.plugins.demo_tools"]\n'
        "entrypoints = false\n"
        '[logging]\nformat = "json"\n'  # from the config file this time, not the flag
        + agent_toml("lookup", steps=steps, tools=["orders.lookup"], budgets={"timeout_s": 30})
    )
    args = ["--config", str(config), "--listen", "127.0.0.1:0", "--log-level", "INFO"]
    with spawn_runtime(args, cwd=tmp_path) as runtime:
        with Client(runtime.address, timeout=60) as client:
            events = [e for e in client.run_agent("lookup", "Where is A100?", timeout=60) if e.seq]
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED, events[-1]
        runtime.stop()
        lines = lines_of(runtime.stderr_text(), "the runtime or its tool host")  # one stderr, both
    host = [line for line in lines if line["logger"].startswith("agentrt.toolhost")]
    assert host, "the spawned host's lines"
    story = [line["event"] for line in lines if line.get("run_id") == events[0].run_id and "event" in line]
    assert story[0] == "run.started" and story[-1] == "run.completed", story


def test_a_child_runs_lines_carry_its_own_ids_not_its_parents_call(
    tmp_path: Path, sqlite_url: str, tool_host: ToolHostProcess
) -> None:
    manager = [
        {"text": "", "tool_calls": [{"tool": "agent.researcher", "arguments": {"input": "status of A100?"}}]},
        {"text": "delivered"},
    ]
    researcher = [
        {"text": "", "tool_calls": [{"tool": "orders.lookup", "arguments": {"order_id": "A100"}}]},
        {"text": "A100 was delivered."},
    ]
    config = tmp_path / "agentrt.toml"
    config.write_text(
        f'db_url = "{sqlite_url}"\n[[tool_hosts]]\nname = "local"\naddress = "{tool_host.address}"\n'
        + agent_toml("manager", steps=manager, tools=[], budgets={})
        + 'agent_tools = ["researcher"]\n'
        + agent_toml("researcher", steps=researcher, tools=["orders.lookup"], budgets={})
    )
    args = ["--config", str(config), "--listen", "127.0.0.1:0", "--log-format", "json"]
    with spawn_runtime([*args, "--log-level", "WARNING,agentrt.run=INFO"], cwd=tmp_path) as runtime:
        with Client(runtime.address, timeout=60) as client:
            events = [e for e in client.run_agent("manager", "How is A100?", timeout=60) if e.seq]
            (child,) = client.list_runs(agent_name="researcher").runs
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED, events[-1]
        runtime.stop()
        lines = lines_of(runtime.stderr_text(), "the runtime")
    parent_call = next(e.tool_started.call_id for e in events if e.HasField("tool_started"))
    child_lines = [line for line in lines if line.get("run_id") == child.run_id]
    assert child_lines[0]["event"] == "run.started"
    assert child_lines[-1]["event"] == "run.completed"
    # Only its tool lines name a call (its own); none of its other lines names one (the parent's
    # call, in whose context the child was started, least of all).
    assert all("call_id" not in line for line in child_lines if not line["event"].startswith("tool.")), (
        child_lines
    )
    parent_lines = [line for line in lines if line.get("run_id") == events[0].run_id]
    assert any(line.get("call_id") == parent_call for line in parent_lines)
