"""Tool hosts that come and go, pools of them, and SIGHUP, with real runtime and tool host processes.

- A runtime whose configured host is down starts, serves runs on its other host, and learns the
  first host's tools when it comes up; restarted with another plugin version and tool set, the
  host is listed again: new specs are served, a tool it dropped is refused.
- A pool of two hosts (``addresses``) spreads reads over both; one killed mid-run fails no read.
- SIGHUP removes and adds hosts (one behind ``dns:///``) without a restart; a bad config changes
  nothing and says why.
"""

from __future__ import annotations

import json
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentrt.client import Client, RPCError
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import RuntimeProcess, ToolHostProcess, spawn_runtime, spawn_tool_host, start_tool_host
from tests.e2e.conftest import agent_toml

PLUGIN = str(Path(__file__).with_name("_pool_plugin.py"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def whoami_steps(count: int, *, sleep_s: float = 0.0) -> list[dict[str, Any]]:
    calls = [
        {
            "text": f"call {n}",
            "tool_calls": [{"tool": "pool.whoami", "arguments": {"n": n, "sleep_s": sleep_s}}],
        }
        for n in range(count)
    ]
    return [*calls, {"text": "done"}]


def agent(name: str, tools: list[str], steps: list[dict[str, Any]]) -> str:
    budgets = {"timeout_s": 60, "max_model_steps": len(steps) + 1, "max_tool_calls": 2 * len(steps)}
    # Every call has other arguments and another result: no loop exit applies, but say so.
    return (
        agent_toml(name, steps=steps, tools=tools, budgets=budgets)
        + "loops = { max_steps_without_new_fact = 0 }\n"
    )


def host_toml(name: str, **fields: Any) -> str:
    values = "".join(f"{key} = {json.dumps(value)}\n" for key, value in fields.items())
    return f'[[tool_hosts]]\nname = "{name}"\n{values}'


def base_toml(db_url: str, *, tool_attempts: int = 5) -> str:
    # tool_attempts: a call to a pending tool waits connect_s (5 s) per attempt for its host.
    return (
        f'db_url = "{db_url}"\nlease_ttl_s = 3.0\npoll_interval_s = 0.2\ngrace_s = 1.0\n'
        f"tool_attempts = {tool_attempts}\n"
    )


def runtime_args(config: Path) -> list[str]:
    # Re-lists and reloads are logged at INFO: the tests read those lines.
    return [
        "--config",
        str(config),
        "--listen",
        "127.0.0.1:0",
        "--log-level",
        "agentrt.tools=INFO,agentrt.server=INFO",
    ]


def events_of(client: Client, run_id: str) -> list[run_pb2.RunEvent]:
    events = []
    for event in client.stream_events(run_id, follow=True, timeout=60):
        events.append(event)
        if event.HasField("run_ended"):
            break
    return events


def run(client: Client, agent_name: str) -> list[run_pb2.RunEvent]:
    return events_of(client, client.start_run(agent_name, "go").run_id)


def completed(events: list[run_pb2.RunEvent]) -> list[dict[str, Any]]:
    """The tool results of a run that completed (without their time); it failed no call."""
    return [{k: v for k, v in r.items() if k != "at"} for r in timed_results(events)]


def timed_results(events: list[run_pb2.RunEvent]) -> list[dict[str, Any]]:
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED, events[-1]
    assert not [e.tool_failed for e in events if e.HasField("tool_failed")]
    return [json.loads(e.tool_completed.result_json) for e in events if e.HasField("tool_completed")]


def wait_for_stderr(runtime: RuntimeProcess, text: str, *, after: int = 0, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in runtime.stderr_text()[after:]:
        assert time.monotonic() < deadline, (
            f"no {text!r} within {timeout:g}s:\n{runtime.stderr_text()[-3000:]}"
        )
        time.sleep(0.05)


@pytest.fixture
def echo_host(tmp_path: Path) -> Iterator[ToolHostProcess]:
    with spawn_tool_host(tmp_path / "echo-host", plugins=["agentrt.plugins.demo_tools"]) as host:
        yield host


def test_a_host_down_at_start_is_served_once_it_is_up_and_listed_again_when_it_restarts(
    tmp_path: Path, sqlite_url: str, echo_host: ToolHostProcess
) -> None:
    late_address = f"127.0.0.1:{free_port()}"
    echo = [
        {"text": "echo", "tool_calls": [{"tool": "noop.echo", "arguments": {"text": "hi"}}]},
        {"text": "ok"},
    ]
    extra = [{"text": "extra", "tool_calls": [{"tool": "pool.extra", "arguments": {}}]}, {"text": "ok"}]
    guarded = [{"text": "guarded", "tool_calls": [{"tool": "pool.guarded", "arguments": {}}]}, {"text": "ok"}]
    config = tmp_path / "agentrt.toml"
    config.write_text(
        base_toml(sqlite_url)
        + host_toml("echo", address=echo_host.address)
        + host_toml("late", address=late_address)
        + agent("echo", ["noop.echo"], echo)
        + agent("who", ["pool.whoami"], whoami_steps(1))
        + agent("extra", ["pool.extra"], extra)
        + agent("guarded", ["pool.guarded"], guarded)
    )
    began = time.monotonic()
    with spawn_runtime(runtime_args(config), cwd=tmp_path) as runtime:
        print(f"host down at start: the runtime served after {time.monotonic() - began:.2f}s")
        assert "['pool.extra', 'pool.guarded', 'pool.whoami'] are pending" in runtime.stderr_text()
        with Client(runtime.address) as client:
            # The other host's tools are served at once.
            assert completed(run(client, "echo")) == [{"text": "hi"}]
            # Runs of pending tools are accepted; their calls wait for the host, which comes up now.
            waiting = client.start_run("who", "go")
            to_approve = client.start_run("guarded", "go")
            late = start_tool_host(
                tmp_path / "late-host",
                plugins=[PLUGIN],
                listen=late_address,
                extra_args=["--set", "pool.extra=1"],
            )
            try:
                up = time.monotonic()
                waited = events_of(client, waiting.run_id)
                (served,) = completed(waited)
                # It started once learned, with the contract version the host listed (R5.6).
                assert [e.tool_started.tool_version for e in waited if e.HasField("tool_started")] == ["1"]
                print(f"host up: the waiting run completed {time.monotonic() - up:.2f}s after it listened")
                assert served == {"pid": late.pid, "version": "1", "n": 0}
                assert completed(run(client, "extra")) == [{"pid": late.pid}]
                # The call waited unstarted: once its spec was learned it was put to a person, not run.
                for event in client.stream_events(to_approve.run_id, follow=True, timeout=30):
                    assert not event.HasField("tool_completed") and not event.HasField("tool_started")
                    if event.HasField("approval_requested"):
                        assert event.approval_requested.tool == "pool.guarded"
                        break
                client.cancel_run(to_approve.run_id, reason="test over")
                # Restarted with a new plugin version and without pool.extra: listed again.
                seen = len(runtime.stderr_text())
                late.stop()
                late = start_tool_host(
                    tmp_path / "late-host",
                    plugins=[PLUGIN],
                    listen=late_address,
                    extra_args=["--set", "pool.version=2"],
                )
                wait_for_stderr(runtime, "tool host 'late' listed its tools again", after=seen)
                (served,) = completed(run(client, "who"))
                assert served == {"pid": late.pid, "version": "2", "n": 0}
                with pytest.raises(RPCError) as refused:
                    client.start_run("extra", "go")
                assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
                assert "pool.extra" in str(refused.value)
            finally:
                late.stop()
            relists = runtime.metrics()
    assert relists.value("agentrt_tool_host_relist_count_total", host="late", outcome="failed") >= 1
    assert relists.value("agentrt_tool_host_relist_count_total", host="late", outcome="changed") == 1


def test_a_pool_spreads_reads_over_its_members_and_a_member_killed_mid_run_fails_none(
    tmp_path: Path, sqlite_url: str
) -> None:
    members = [start_tool_host(tmp_path / f"member-{i}", plugins=[PLUGIN]) for i in range(2)]
    try:
        config = tmp_path / "agentrt.toml"
        config.write_text(
            base_toml(sqlite_url)
            + host_toml("pool", addresses=[m.address for m in members])
            + agent("spread", ["pool.whoami"], whoami_steps(10))
            + agent("long", ["pool.whoami"], whoami_steps(24, sleep_s=0.05))
        )
        with (
            spawn_runtime(runtime_args(config), cwd=tmp_path) as runtime,
            Client(runtime.address) as client,
        ):
            pids = [r["pid"] for r in completed(run(client, "spread"))]
            assert sorted(set(pids)) == sorted(m.pid for m in members)  # both served
            killed, survivor = members
            events: list[run_pb2.RunEvent] = []
            killed_at = 0.0
            for event in client.run_agent("long", "go", timeout=60):
                events.append(event)
                if not killed_at and sum(e.HasField("tool_completed") for e in events) == 6:
                    killed_at = time.time()
                    killed.kill()  # -9, while the run goes on calling
            results = timed_results(events)
            retries = sum(e.HasField("retry_scheduled") for e in events)
            print(f"pool: {len(results)} reads, a member killed after 6, 0 failed, {retries} retried")
            assert len(results) == 24
            # The dead member answered nothing after its death; the survivor took every later call.
            assert all(r["at"] < killed_at for r in results if r["pid"] == killed.pid)
            later = [r["pid"] for r in results if r["at"] > killed_at]
            assert len(later) >= 10 and set(later) == {survivor.pid}
    finally:
        for member in members:
            member.stop()


def test_sighup_removes_and_adds_hosts_and_a_bad_config_changes_nothing(
    tmp_path: Path, sqlite_url: str
) -> None:
    with spawn_tool_host(tmp_path / "host", plugins=[PLUGIN]) as host:
        port = host.address.rpartition(":")[2]
        # A short connect layer: a call of a pending tool gives up on its host in 2 x 0.5 s.
        timeouts = "[timeouts]\nconnect_s = 0.5\n"
        common = (
            base_toml(sqlite_url, tool_attempts=2) + timeouts + agent("who", ["pool.whoami"], whoami_steps(1))
        )
        config = tmp_path / "agentrt.toml"
        config.write_text(common + host_toml("a", address=host.address))
        with spawn_runtime(runtime_args(config), cwd=tmp_path) as runtime:

            def reload(text: str, logged: str) -> None:
                seen = len(runtime.stderr_text())
                config.write_text(text)
                runtime.process.send_signal(signal.SIGHUP)
                wait_for_stderr(runtime, logged, after=seen)

            with Client(runtime.address) as client:
                assert completed(run(client, "who"))[0]["pid"] == host.pid
                reload(common + host_toml("a", addresses=["toolhost-a:1"]), "config reload (SIGHUP) refused")
                assert "is not IP:PORT" in runtime.stderr_text()
                assert completed(run(client, "who"))[0]["pid"] == host.pid  # still served by "a"
                reload(common, "tool hosts added [], removed ['a']")
                with pytest.raises(RPCError) as refused:
                    client.start_run("who", "go")
                assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
                # Back behind a DNS name, a pool of one here (localhost resolves to 127.0.0.1 only).
                # "b" at an address nobody listens on: its tools are pending, a call gives up unsent.
                dead = f"127.0.0.1:{free_port()}"
                reload(common + host_toml("b", address=dead), "tool hosts added ['b']")
                events = run(client, "who")
                assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED  # the model went on
                (failed,) = [e.tool_failed for e in events if e.HasField("tool_failed")]
                assert "pool.whoami is not served yet" in failed.error.message
                assert not any(e.HasField("tool_started") for e in events)  # never started, never sent
                reload(common + host_toml("b", address=f"dns:///localhost:{port}"), "replaced ['b']")
                assert completed(run(client, "who"))[0]["pid"] == host.pid
            assert runtime.process.poll() is None


def test_a_run_recovered_while_its_tool_host_is_down_finishes_its_read_once_the_host_is_up(
    tmp_path: Path, sqlite_url: str
) -> None:
    address = f"127.0.0.1:{free_port()}"
    config = tmp_path / "agentrt.toml"
    config.write_text(
        base_toml(sqlite_url)
        + host_toml("late", address=address)
        + agent("slow", ["pool.whoami"], whoami_steps(1, sleep_s=1.0))
    )
    host = start_tool_host(tmp_path / "host", plugins=[PLUGIN], listen=address)
    try:
        first = RuntimeProcess(runtime_args(config), cwd=tmp_path)
        try:
            first.wait_ready()
            with Client(first.address) as client:
                run_id = client.start_run("slow", "go").run_id
                for event in client.stream_events(run_id, follow=True, timeout=30):
                    if event.HasField("tool_started"):
                        break
            first.kill()  # -9 with the read in flight
        finally:
            first.close()
        host.stop()
        # A new runtime with the host down takes the run over once the lease lapses. The read's
        # spec is not known yet: the call waits for its host rather than be taken for a write.
        with spawn_runtime(runtime_args(config), cwd=tmp_path) as second, Client(second.address) as client:
            wait_for_stderr(second, "does not answer ListTools yet")
            host = start_tool_host(tmp_path / "host", plugins=[PLUGIN], listen=address)
            events = list(client.stream_events(run_id, follow=True, timeout=60))
            ended = next(e for e in reversed(events) if e.HasField("run_ended"))
            assert ended.run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
            assert not any(e.HasField("tool_outcome_unknown") for e in events)
            assert [
                json.loads(e.tool_completed.result_json)["n"] for e in events if e.HasField("tool_completed")
            ] == [0]
    finally:
        host.stop()
