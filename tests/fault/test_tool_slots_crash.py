"""A runtime killed while a call waits for a tool slot: after a restart the call runs exactly once.

The wait for a slot sits between ``tool.started`` (persisted) and the call leaving the runtime;
a crash there must neither lose the call nor send it twice (DESIGN §11.1, §11.7).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentrt.client import Client, event_type
from agentrt.plugins.demo_tools import SLEEP_LOG_FILE
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import RuntimeProcess, ToolHostProcess, spawn_tool_host
from tests.e2e.conftest import agent_toml

HOLD = [
    {"text": "holding", "tool_calls": [{"tool": "sleep.wait", "arguments": {"seconds": 4}}]},
    {"text": "held"},
]
# The queued run's nap is its second call (call_2_0), so the host's log tells the two runs apart.
QUEUED = [
    {"text": "echo first", "tool_calls": [{"tool": "noop.echo", "arguments": {"text": "hi"}}]},
    {"text": "napping", "tool_calls": [{"tool": "sleep.wait", "arguments": {"seconds": 0.1}}]},
    {"text": "woke"},
]


@pytest.fixture
def host(tmp_path: Path) -> Iterator[ToolHostProcess]:
    with spawn_tool_host(tmp_path / "toolhost", plugins=["agentrt.plugins.demo_tools"]) as started:
        yield started


def start(tmp_path: Path, config: Path) -> RuntimeProcess:
    runtime = RuntimeProcess(["--config", str(config), "--listen", "127.0.0.1:0"], cwd=tmp_path)
    runtime.wait_ready()
    return runtime


def wait_until(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, f"not {what} within {timeout}s"
        time.sleep(0.05)


def test_a_call_queued_for_a_slot_survives_a_crash_and_runs_once(
    tmp_path: Path, host: ToolHostProcess, sqlite_url: str
) -> None:
    config = tmp_path / "slots.toml"
    config.write_text(
        f'db_url = "{sqlite_url}"\npoll_interval_s = 0.1\nlease_ttl_s = 1.0\ngrace_s = 0.5\n'
        f'[[tool_hosts]]\nname = "local"\naddress = "{host.address}"\n'
        '[tool_limits]\nmax_concurrent_calls = { "sleep.wait" = 1 }\n'
        + agent_toml("hold", steps=HOLD, tools=["sleep.wait"], budgets={"timeout_s": 60})
        + agent_toml("queued", steps=QUEUED, tools=["noop.echo", "sleep.wait"], budgets={"timeout_s": 60})
    )
    log = host.data_dir / SLEEP_LOG_FILE

    def lines() -> list[str]:
        return log.read_text().splitlines() if log.exists() else []

    first = start(tmp_path, config)
    try:
        with Client(first.address) as client:
            holder = client.start_run("hold", "hold the slot").run_id
            wait_until(lambda: "started call_1_0" in lines(), "holding the slot")
            queued = client.start_run("queued", "wait for it").run_id

            def nap_started() -> bool:
                events = client.stream_events(queued, follow=False, timeout=10)
                return any(
                    e.HasField("tool_started") and e.tool_started.call_id == "call_2_0" for e in events
                )

            wait_until(nap_started, "the nap persisted as started")
            assert "started call_2_0" not in lines()  # waiting for the slot, not sent
        first.kill()
    finally:
        first.close()

    second = start(tmp_path, config)
    try:
        with Client(second.address) as client:
            for run_id in (queued, holder):
                events = [e for e in client.stream_events(run_id, follow=True, timeout=60) if e.seq]
                assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED, events[-1]
                done = [e.tool_completed.call_id for e in events if event_type(e) == "tool.completed"]
                assert len(done) == len(set(done)), done  # no call's result recorded twice
    finally:
        second.close()
    assert lines().count("started call_2_0") == 1, lines()
    assert lines().count("finished call_2_0") == 1, lines()
