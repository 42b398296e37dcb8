"""A run persisted by an older runtime is upgraded or ended safely; a changed tool contract ends it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from agentrt.client import Client
from agentrt.plugins.demo_tools import count_refunds
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.server.core import STATE_VERSION
from agentrt.testing import ToolHostProcess, spawn_runtime
from tests.e2e.test_approvals import config, start_until_paused


def pause_then_edit(
    tmp_path: Path, sqlite_url: str, tool_host: ToolHostProcess, sql: list[str]
) -> tuple[str, list[str]]:
    """Pause a refund on approval, stop the runtime, then rewrite what it stored as an older runtime would."""
    args = ["--config", str(config(tmp_path, sqlite_url, tool_host)), "--listen", "127.0.0.1:0"]
    with spawn_runtime(args, cwd=tmp_path) as runtime, Client(runtime.address) as client:
        run_id, _ = start_until_paused(client, "refunder")
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as db:
        for statement in sql:
            db.execute(statement, {"run_id": run_id})
    return run_id, args


def approve_and_follow(
    tmp_path: Path, args: list[str], run_id: str
) -> tuple[list[run_pb2.RunEvent], run_pb2.Run]:
    with spawn_runtime(args, cwd=tmp_path) as runtime, Client(runtime.address) as client:
        run = client.get_run(run_id)
        pending = run.pending_approval
        client.resolve_approval(
            run_id,
            pending.approval_id,
            approve=True,
            args_hash=pending.args_hash,
            expected_revision=run.revision,
        )
        events = [e for e in client.stream_events(run_id, follow=True, timeout=60) if e.seq]
        return events, client.get_run(run_id)


def state_version(sqlite_url: str, run_id: str) -> int:
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as db:
        return int(db.execute("SELECT state_version FROM runs WHERE run_id = ?", (run_id,)).fetchone()[0])


def test_an_older_state_version_is_upgraded_and_the_run_resumes(
    tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str
) -> None:
    run_id, args = pause_then_edit(
        tmp_path,
        sqlite_url,
        tool_host,
        [
            "UPDATE runs SET state_version = 1 WHERE run_id = :run_id",
        ],
    )
    _, run = approve_and_follow(tmp_path, args, run_id)
    assert (
        run.phase == run_pb2.RUN_PHASE_COMPLETED and count_refunds(tool_host.data_dir / "refunds.sqlite") == 1
    )
    assert state_version(sqlite_url, run_id) == STATE_VERSION


def test_a_state_version_without_an_upgrader_ends_the_run_safely(
    tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str
) -> None:
    run_id, args = pause_then_edit(
        tmp_path,
        sqlite_url,
        tool_host,
        [
            "UPDATE runs SET state_version = 0 WHERE run_id = :run_id",
        ],
    )
    events, run = approve_and_follow(tmp_path, args, run_id)
    assert run.phase == run_pb2.RUN_PHASE_FAILED and run.reason == "incompatible_version"
    assert events[-1].run_ended.reason == "incompatible_version"
    assert count_refunds(tool_host.data_dir / "refunds.sqlite") == 0


def test_a_pending_call_whose_tool_contract_changed_ends_with_incompatible_version(
    tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str
) -> None:
    # The approval was asked under refund.issue version "2"; the tool host now serves version "1".
    run_id, args = pause_then_edit(
        tmp_path,
        sqlite_url,
        tool_host,
        [
            "UPDATE run_events SET payload = json_set(payload, '$.tool_version', '2') "
            "WHERE run_id = :run_id AND type = 'approval.requested'",
            "UPDATE runs SET pending_approval = json_set(pending_approval, '$.tool_version', '2') "
            "WHERE run_id = :run_id",
        ],
    )
    events, run = approve_and_follow(tmp_path, args, run_id)
    assert run.phase == run_pb2.RUN_PHASE_FAILED and run.reason == "incompatible_version"
    failed = next(e.run_failed for e in events if e.HasField("run_failed"))
    assert "refund.issue went from version 2 to 1" in failed.message
    assert not any(e.HasField("tool_started") and e.tool_started.tool == "refund.issue" for e in events)
    assert count_refunds(tool_host.data_dir / "refunds.sqlite") == 0
    assert failed.reason == "incompatible_version"
