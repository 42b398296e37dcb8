"""Crash the runtime around the commit of a 10 MB tool result stored as a payload, then restart.

The payload is written before the event that names it: a crash in between leaves a payload no event
names yet; the restarted runtime sends the (read-only) call again, stores the same content under the
same id (once), and the run completes with a readable, byte-identical result and a gapless log.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select

from agentrt.client import Client
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.server.engine._faults import FAULT_ENV, FAULT_EXIT_CODE
from agentrt.server.store._schema import payloads
from agentrt.testing import RuntimeProcess, ToolHostProcess, spawn_tool_host
from tests.e2e.test_large_payloads import TEN_MB, blob_json, config
from tests.fault.test_crash_points import check_log


@pytest.fixture
def blob_host(tmp_path: Path) -> Iterator[ToolHostProcess]:
    with spawn_tool_host(tmp_path / "toolhost", plugins=["agentrt.plugins.blob_tools"]) as host:
        yield host


@pytest.mark.parametrize(
    "point", ["before_commit:tool.completed", "after_commit:tool.completed", "tool_response_received"]
)
def test_a_crash_around_a_payload_commit_recovers_with_the_payload_stored_once(
    point: str, tmp_path: Path, blob_host: ToolHostProcess, sqlite_url: str
) -> None:
    path = config(tmp_path, db_url=sqlite_url, host=blob_host)
    args = ["--config", str(path), "--listen", "127.0.0.1:0"]
    crashed = RuntimeProcess(args, cwd=tmp_path, env={**os.environ, FAULT_ENV: point})
    try:
        crashed.wait_ready(60)
        with Client(crashed.address) as client:
            run_id = client.start_run("ten-mb", "make it").run_id
        assert crashed.wait_exit(60) == FAULT_EXIT_CODE, crashed.stderr_text()[-2000:]
    finally:
        crashed.close()
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    healthy = RuntimeProcess(args, cwd=tmp_path, env=env)
    try:
        healthy.wait_ready(60)
        with Client(healthy.address) as client:
            events = list(client.stream_events(run_id, follow=True, timeout=60))
            check_log(events)
            assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
            (completed,) = [e.tool_completed for e in events if e.HasField("tool_completed")]
            expected = blob_json(TEN_MB)
            assert completed.result_ref.sha256 == hashlib.sha256(expected).hexdigest()
            assert client.get_payload(run_id, completed.result_ref.payload_id).data == expected
        healthy.stop()
    finally:
        healthy.close()
    engine = create_engine(sqlite_url)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(payloads)).scalar() == 1
    engine.dispose()
