"""Crash the runtime at every point of a run's cleanup, restart it, and check the resource.

A run creates a sandbox (its result registers sandbox.destroy) and completes. The runtime is
killed (``os._exit``) around each commit of the closing and the cleanup, and once with the
destroy answered but not yet recorded. After a restart, the run ends COMPLETED, the sandbox is
gone, its destroy's body ran exactly once (the tool host's ledger answers a repeat under the
same key), and the log is gapless with one run.closing and one cleanup.completed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrt.client import Client, event_type
from agentrt.plugins.sandbox_tools import count_destroys, live_sandboxes
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.server.engine._faults import FAULT_EXIT_CODE
from agentrt.testing import spawn_tool_host
from tests.fault.conftest import runtime_env, serve_fake_openai, start_runtime

CRASH_POINTS = [
    "before_commit:run.closing",
    "after_commit:run.closing",
    "before_commit:cleanup.started",
    "after_commit:cleanup.started",
    "cleanup_response_received",
    "before_commit:cleanup.completed",
    "after_commit:cleanup.completed",
]
SCRIPT = {1: {"tool": "sandbox.create", "arguments": {"purpose": "build"}}, 2: {"text": "Built."}}


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_crash_anywhere_in_cleanup_releases_the_resource_once(point: str, tmp_path: Path) -> None:
    with (
        spawn_tool_host(tmp_path / "host", plugins=["agentrt.plugins.sandbox_tools"]) as host,
        serve_fake_openai(SCRIPT) as (_, model_url),
    ):
        base = {
            "db_url": f"sqlite:///{tmp_path / 'rt.sqlite'}",
            "tool_host": host.address,
            "model_url": model_url,
            "tools": ("sandbox.create",),
        }
        crashed = start_runtime(tmp_path, runtime_env(**base, fault=point))
        try:
            with Client(crashed.address) as client:
                run_id = client.start_run("refund", "build it").run_id
            assert crashed.wait_exit(60) == FAULT_EXIT_CODE, crashed.stderr_text()[-2000:]
        finally:
            crashed.close()
        healthy = start_runtime(tmp_path, runtime_env(**base))
        try:
            with Client(healthy.address) as client:
                events = [e for e in client.stream_events(run_id, follow=True, timeout=60) if e.seq]
                run = client.get_run(run_id)
        finally:
            healthy.close()
        destroys = count_destroys(tmp_path / "host")
        left = live_sandboxes(tmp_path / "host")
    types = [event_type(e) for e in events]
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "gap or duplicate seq"
    assert run.phase == run_pb2.RUN_PHASE_COMPLETED and run.output == "Built.", types
    assert run.cleanup_status == run_pb2.CLEANUP_STATUS_DONE
    assert types.count("run.closing") == 1 and types.count("cleanup.completed") == 1, types
    assert types[-2:] == ["run.completed", "run.ended"]
    assert left == [] and destroys == 1, (point, destroys)
