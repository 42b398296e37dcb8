"""Both servers as real processes on the event loop they are told: the startup line, a run end to
end, and the refusals (unknown value, uvloop asked for but missing) with exit 2."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from agentrt.client import Client, event_type
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import spawn_runtime, spawn_tool_host
from tests.e2e.conftest import write_config

# What the runtime logs at start is at INFO, under its default WARNING level.
INFO = ["--log-level", "agentrt.server=INFO"]
# Runs a CLI with uvloop made unimportable (a None entry in sys.modules fails its import).
WITHOUT_UVLOOP = (
    "import sys; sys.modules['uvloop'] = None; from {module} import main; sys.exit(main(sys.argv[1:]))"
)


def _loop_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "event loop: " in line]


def _serve_a_run(
    tmp_path: Path, *, env: dict[str, str], tool_host_args: Sequence[str] = ()
) -> tuple[str, str]:
    """A tool host and a runtime; one refund run to its end. Returns their event loop lines."""
    with spawn_tool_host(
        tmp_path / "toolhost", plugins=["agentrt.plugins.demo_tools"], extra_args=tool_host_args
    ) as host:
        config = write_config(
            tmp_path / "agentrt.toml",
            db_url=f"sqlite:///{tmp_path / 'a.sqlite'}",
            tool_host_address=host.address,
        )
        args = ["--config", str(config), "--listen", "127.0.0.1:0", *INFO]
        with spawn_runtime(args, cwd=tmp_path, env=env) as runtime:
            with Client(runtime.address) as client:
                events = list(client.run_agent("refund", "please refund A100", timeout=60))
            assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
            assert [event_type(e) for e in events].count("tool.completed") == 2
            # Graceful stops through the loop's signal handlers: SIGTERM here, SIGINT for the host.
            assert runtime.stop() == 0, runtime.stderr_text()
            runtime_lines = _loop_lines(runtime.stderr_text())
        host.process.send_signal(signal.SIGINT)
        assert host.wait(timeout=30) == 0, host.stderr_text()
        assert "agentrt.toolhost: shutting down" in host.stderr_text()
        host_lines = _loop_lines(host.stderr_text())
    assert len(runtime_lines) == 1, runtime_lines
    assert len(host_lines) == 1, host_lines
    return runtime_lines[0], host_lines[0]


def test_both_servers_run_on_uvloop_by_default_and_serve_a_run(tmp_path: Path) -> None:
    uvloop = pytest.importorskip("uvloop")
    env = {
        k: v for k, v in os.environ.items() if k not in ("AGENTRT_EVENT_LOOP", "AGENTRT_TOOLHOST_EVENT_LOOP")
    }
    runtime_line, host_line = _serve_a_run(tmp_path, env=env)
    for line in (runtime_line, host_line):
        assert f"event loop: uvloop (uvloop {uvloop.__version__}, uvloop)" in line


def test_both_servers_run_on_asyncio_when_configured(tmp_path: Path) -> None:
    # The runtime's env also carries the tool host's variable (what a spawning runtime passes on):
    # it is not a runtime setting, so the runtime starts.
    env = {**os.environ, "AGENTRT_EVENT_LOOP": "asyncio", "AGENTRT_TOOLHOST_EVENT_LOOP": "asyncio"}
    runtime_line, host_line = _serve_a_run(tmp_path, env=env, tool_host_args=["--event-loop", "asyncio"])
    for line in (runtime_line, host_line):
        assert "event loop: asyncio (as configured, asyncio." in line


def _run_cli(args: list[str], *, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def test_serve_refuses_uvloop_when_it_is_missing(tmp_path: Path) -> None:
    env = {**os.environ, "AGENTRT_EVENT_LOOP": "uvloop"}
    code = WITHOUT_UVLOOP.format(module="agentrt.server._main")
    done = _run_cli(["-c", code, "--listen", "127.0.0.1:0"], env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "agentrt serve: event loop 'uvloop' is configured but uvloop does not import" in done.stderr
    assert "pip install 'agentrt-server[uvloop]'" in done.stderr


def test_serve_falls_back_to_asyncio_on_auto_when_uvloop_is_missing(tmp_path: Path) -> None:
    env = {**os.environ, "AGENTRT_EVENT_LOOP": "auto"}
    code = WITHOUT_UVLOOP.format(module="agentrt.server._main")
    # It serves (no tool hosts, SQLite in tmp_path) until SIGTERM; a hang is cut by pytest-timeout.
    process = subprocess.Popen(
        [sys.executable, "-c", code, "--listen", "127.0.0.1:0", *INFO],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()  # the runtime announces its address once it serves
        assert first, process.stderr.read() if process.stderr else ""
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    lines = _loop_lines(stderr)
    assert len(lines) == 1 and "event loop: asyncio (uvloop not installed, asyncio." in lines[0], stderr


def test_serve_refuses_an_unknown_event_loop_naming_the_setting(tmp_path: Path) -> None:
    env = {**os.environ, "AGENTRT_EVENT_LOOP": "libuv"}
    done = _run_cli(["-m", "agentrt.server", "--listen", "127.0.0.1:0"], env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert (
        "agentrt serve: invalid configuration: event_loop: Input should be 'auto', 'uvloop' or 'asyncio'"
        in (done.stderr)
    )


def test_toolhost_refuses_uvloop_when_it_is_missing(tmp_path: Path) -> None:
    code = WITHOUT_UVLOOP.format(module="agentrt.toolhost._cli")
    done = _run_cli(
        ["-c", code, "--event-loop", "uvloop", "--no-entrypoints"], env=dict(os.environ), cwd=tmp_path
    )
    assert done.returncode == 2, done.stderr
    assert (
        "error: --event-loop / $AGENTRT_TOOLHOST_EVENT_LOOP: event loop 'uvloop' is configured" in done.stderr
    )
    assert "pip install 'agentrt-toolhost[uvloop]'" in done.stderr
    assert "listening on" not in done.stdout


@pytest.mark.parametrize("how", ["flag", "env"])
def test_toolhost_refuses_an_unknown_event_loop(tmp_path: Path, how: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AGENTRT_TOOLHOST_EVENT_LOOP"}
    args = ["-m", "agentrt.toolhost", "--no-entrypoints"]
    if how == "flag":
        args += ["--event-loop", "trio"]
    else:
        env["AGENTRT_TOOLHOST_EVENT_LOOP"] = "trio"
    done = _run_cli(args, env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "unknown event loop 'trio': choose one of auto, uvloop, asyncio" in done.stderr
