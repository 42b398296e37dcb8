"""MCP servers as a tool source: real counting MCP servers (stdio and Streamable HTTP, written with
the ``mcp`` SDK in agentrt.testing), a real tool host serving them, a real runtime running agents.

- The MCP server sees the run's ``traceparent`` and the call's idempotency key in ``_meta``.
- A runtime killed -9 while an MCP write runs: the write finishes, the ledger answers the
  recovered run, and the write ran once (0 duplicates).
- A tool host killed -9 during an MCP write: the run goes to UNKNOWN_OUTCOME (MCP has no query)
  and the write ran at most once.
- A read is served across an MCP server restart (the host restarts its stdio child).
- A changed tool definition is refused until re-approved by config.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from agentrt.client import Client, event_type
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.proto.toolhost.v1.tool_host_service_pb2 import ListToolsRequest
from agentrt.proto.toolhost.v1.tool_host_service_pb2_grpc import ToolHostServiceStub
from agentrt.testing import RuntimeProcess, ToolHostProcess, start_tool_host
from agentrt.testing.mcp_server import executions, seen_meta, server_pid, wait_for_started
from tests.e2e.conftest import agent_toml

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def host_toml(path: Path, *, stdio_store: Path, http_port: int | None = None, extra: str = "") -> Path:
    text = (
        f'[mcp_servers.local]\ncommand = "{sys.executable}"\n'
        f'args = ["-m", "agentrt.testing.mcp_server", "--store", "{stdio_store}"]\n'
    )
    if http_port is not None:
        text = (
            f'[mcp]\nallowed_urls = ["http://127.0.0.1:{http_port}"]\n{text}'
            f'[mcp_servers.remote]\nurl = "http://127.0.0.1:{http_port}/mcp"\n'
        )
    path.write_text(text + extra)
    return path


def runtime_toml(path: Path, *, db: Path, host: str, remote: bool = True) -> Path:
    text = (
        f'db_url = "sqlite:///{db}"\nlease_ttl_s = 2.0\npoll_interval_s = 0.1\ngrace_s = 0.5\n'
        f'query_timeout_s = 0.5\n[[tool_hosts]]\nname = "mcp"\naddress = "{host}"\n'
    )
    for name, tool, arguments in (
        ("write-local", "local.record", {"note": "w"}),
        ("write-remote", "remote.record", {"note": "w"}),
        ("read-local", "local.lookup", {"key": "k"}),
    ):
        if tool.startswith("remote.") and not remote:
            continue
        steps = [
            {"text": "calling", "tool_calls": [{"tool": tool, "arguments": arguments}]},
            {"text": "done"},
        ]
        text += agent_toml(name, steps=steps, tools=[tool], budgets={"max_model_steps": 4, "timeout_s": 60})
    path.write_text(text)
    return path


def start_runtime(config: Path, cwd: Path) -> RuntimeProcess:
    runtime = RuntimeProcess(["--config", str(config), "--listen", "127.0.0.1:0"], cwd=cwd)
    runtime.wait_ready(60)
    return runtime


def follow(address: str, run_id: str, timeout: float = 60.0) -> list[run_pb2.RunEvent]:
    events: list[run_pb2.RunEvent] = []
    with Client(address) as client:
        try:
            for event in client.stream_events(run_id, follow=True, timeout=timeout):
                if event.seq:
                    events.append(event)
        except Exception as exc:
            run = client.get_run(run_id)
            raise AssertionError(
                f"{exc}; phase {run_pb2.RunPhase.Name(run.phase)}; {[event_type(e) for e in events]}"
            ) from None
    return events


def wait_phase(address: str, run_id: str, phase: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    with Client(address) as client:
        while client.get_run(run_id).phase != phase:
            assert time.monotonic() < deadline, f"run {run_id} never reached {run_pb2.RunPhase.Name(phase)}"
            time.sleep(0.05)


def kill_pid(pid: int) -> None:
    if pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@dataclass
class World:
    root: Path
    stdio_store: Path
    http_store: Path
    http: subprocess.Popen[bytes]
    host: ToolHostProcess
    runtime: RuntimeProcess
    config: Path
    port: int


def start_http_server(port: int, store: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "agentrt.testing.mcp_server", "--transport", "http"]
    http = subprocess.Popen(
        [*command, "--port", str(port), "--store", str(store)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:  # until it accepts connections (bounded)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return http
        except OSError:
            assert time.monotonic() < deadline and http.poll() is None, "the HTTP MCP server did not start"
            time.sleep(0.05)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One HTTP MCP server, one tool host (with a stdio MCP server child), one runtime."""
    root = tmp_path_factory.mktemp("mcp")
    port = free_port()
    http_store = root / "http-store"
    http = start_http_server(port, http_store)
    host: ToolHostProcess | None = None
    runtime: RuntimeProcess | None = None
    try:
        config = host_toml(root / "host.toml", stdio_store=root / "stdio-store", http_port=port)
        host = start_tool_host(root / "host", extra_args=["--config", str(config)])
        runtime = start_runtime(
            runtime_toml(root / "rt.toml", db=root / "rt.sqlite", host=host.address), root
        )
        world = World(root, root / "stdio-store", http_store, http, host, runtime, root / "rt.toml", port)
        yield world
        http, runtime = world.http, world.runtime  # tests replace the ones they restarted
    finally:
        if runtime is not None:
            runtime.close()
        if host is not None:
            host.stop()
        http.terminate()
        http.wait(10)


def test_the_mcp_server_sees_the_runs_traceparent_and_idempotency_key(world: World) -> None:
    before = executions(world.http_store)
    with Client(world.runtime.address, metadata=[("traceparent", TRACEPARENT)]) as client:
        run_id = client.start_run("write-remote", "go").run_id
    events = follow(world.runtime.address, run_id)
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED, [event_type(e) for e in events]
    (started,) = [e.tool_started for e in events if e.HasField("tool_started")]
    assert executions(world.http_store) == before + 1
    seen = seen_meta(world.http_store)[-1]
    assert seen["idempotency_key"] == started.idempotency_key
    assert seen["traceparent"] and seen["traceparent"].split("-")[1] == TRACE_ID


def test_a_runtime_killed_during_an_mcp_write_repeats_nothing(world: World) -> None:
    store = world.stdio_store
    before = executions(store)
    (store / "hold").touch()
    try:
        with Client(world.runtime.address) as client:
            run_id = client.start_run("write-local", "go").run_id
        wait_for_started(store, count=before + 1)
        world.runtime.kill()  # kill -9 while the write is held
        world.runtime.close()
        (store / "release").touch()  # the host lets a write whose caller vanished run to its end
        deadline = time.monotonic() + 30
        while executions(store, phase="done") < before + 1:
            assert time.monotonic() < deadline, "the write never finished"
            time.sleep(0.05)
        world.runtime = start_runtime(world.config, world.root)
        events = follow(world.runtime.address, run_id)
    finally:
        (store / "hold").unlink(missing_ok=True)
        (store / "release").unlink(missing_ok=True)
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED, [event_type(e) for e in events]
    assert executions(store) == before + 1  # 0 duplicates: the ledger answered the recovered run


def test_a_read_is_served_across_an_mcp_server_restart(world: World) -> None:
    store = world.stdio_store
    old = server_pid(store)
    assert old
    kill_pid(old)  # the stdio child dies; the host restarts it with backoff
    with Client(world.runtime.address) as client:
        run_id = client.start_run("read-local", "go").run_id
    events = follow(world.runtime.address, run_id)
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED, [event_type(e) for e in events]
    (completed,) = [e.tool_completed for e in events if e.HasField("tool_completed")]
    assert f'"pid":{old}' not in completed.result_json.replace(" ", "")
    assert server_pid(store) not in (0, old)


def test_a_remote_read_is_served_after_the_http_server_restarts(world: World) -> None:
    world.http.kill()  # the transport is lost; the host connects again with backoff
    world.http.wait(10)
    world.http = start_http_server(world.port, world.http_store)
    reply = world.host.call_tool("remote.lookup", {"key": "z"}, idempotency_key="remote-read-1", timeout_s=30)
    deadline = time.monotonic() + 30
    while reply.error_code == "TRANSIENT" and time.monotonic() < deadline:  # as the runtime retries
        reply = world.host.call_tool(
            "remote.lookup", {"key": "z"}, idempotency_key="remote-read-1", timeout_s=30
        )
    assert reply.error_code == "" and reply.result["pid"] == world.http.pid


def test_a_tool_host_killed_during_an_mcp_write_leaves_the_run_unknown(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "hold").touch()
    config = host_toml(tmp_path / "host.toml", stdio_store=store)
    port = free_port()
    listen = f"127.0.0.1:{port}"
    host = start_tool_host(tmp_path / "host", extra_args=["--config", str(config)], listen=listen)
    runtime: RuntimeProcess | None = None
    try:
        runtime = start_runtime(
            runtime_toml(tmp_path / "rt.toml", db=tmp_path / "rt.sqlite", host=host.address, remote=False),
            tmp_path,
        )
        with Client(runtime.address) as client:
            run_id = client.start_run("write-local", "go").run_id
        wait_for_started(store)
        child = server_pid(store)
        host.kill()  # kill -9 mid-write
        host.wait(10)
        kill_pid(child)  # the held child would wait for a release that never comes
        wait_phase(runtime.address, run_id, run_pb2.RUN_PHASE_UNKNOWN_OUTCOME)
        # The host comes back: its ledger has the write RUNNING from a dead life, and no query hook
        # can say more, so the run stays for a person (ResolveOutcome), never retried blind.
        host.stop()
        (store / "hold").unlink()
        host = start_tool_host(tmp_path / "host", extra_args=["--config", str(config)], listen=listen)
        with Client(runtime.address) as client:
            assert client.get_run(run_id).phase == run_pb2.RUN_PHASE_UNKNOWN_OUTCOME
        assert executions(store) <= 1 and executions(store, phase="done") == 0
    finally:
        if runtime is not None:
            runtime.close()
        host.stop()  # its stdio child sees stdin close and exits


def _call(host: ToolHostProcess, key: str) -> tuple[str, dict[str, object]]:
    """Call local.lookup as a runtime would: a TRANSIENT answer (a read cut by the server's
    restart) is sent again under the same key, within a bound."""
    deadline = time.monotonic() + 30
    while True:
        reply = host.call_tool("local.lookup", {"key": "a"}, idempotency_key=key, timeout_s=30)
        if reply.error_code != "TRANSIENT" or time.monotonic() > deadline:
            return reply.error_code, reply.details


def _version(host: ToolHostProcess) -> str:
    with grpc.insecure_channel(host.address) as channel:
        tools = ToolHostServiceStub(channel).ListTools(ListToolsRequest(), timeout=10).tools
    return next(t.version for t in tools if t.name == "local.lookup")


def test_a_changed_tool_definition_is_refused_until_re_approved(tmp_path: Path) -> None:
    store = tmp_path / "store"
    config = host_toml(tmp_path / "host.toml", stdio_store=store)
    metered = ["--config", str(config), "--metrics-listen", "127.0.0.1:0"]
    host = start_tool_host(tmp_path / "host", extra_args=metered)
    try:
        first = _version(host)
        assert _call(host, "k1")[0] == ""
        store.mkdir(exist_ok=True)
        (store / "definition-v2").touch()  # the next server process lists another definition
        kill_pid(server_pid(store))
        code, details = _call(host, "k2")  # waits for the restarted server, then refuses
        assert code == "UNAUTHORIZED" and details["reason"] == "mcp_tool_changed"
        changed = str(details["version"])
        assert changed != first
        scraped = host.metrics()  # the change is counted where the host's own events are
        assert scraped.value("agentrt_toolhost_events_total", event="mcp_tool_changed") >= 1
        assert scraped.value("agentrt_toolhost_events_total", event="mcp_tool_refused") >= 1
    finally:
        host.stop()
    # Pinned to the old definition: still refused after a restart of the host.
    pinned = f'[mcp_servers.local.tools.lookup]\napproved_versions = ["{first}"]\n'
    config = host_toml(tmp_path / "host.toml", stdio_store=store, extra=pinned)
    with_pin = start_tool_host(tmp_path / "host", extra_args=["--config", str(config)])
    try:
        code, details = _call(with_pin, "k3")
        assert code == "UNAUTHORIZED" and details["reason"] == "mcp_tool_not_approved"
    finally:
        with_pin.stop()
    # Re-approved by config: served again.
    approved = f'[mcp_servers.local.tools.lookup]\napproved_versions = ["{first}", "{changed}"]\n'
    config = host_toml(tmp_path / "host.toml", stdio_store=store, extra=approved)
    reapproved = start_tool_host(tmp_path / "host", extra_args=["--config", str(config)])
    try:
        assert _call(reapproved, "k4")[0] == ""
        assert _version(reapproved) == changed
    finally:
        reapproved.stop()
