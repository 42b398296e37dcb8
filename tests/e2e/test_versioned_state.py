"""A run persisted by an older runtime is upgraded or ended safely; a changed tool contract ends it."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

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


def _as_state_version_2(data: Any) -> Any:
    """A payload as runtimes before exact money stored it: float dollars, summed as floats."""
    if isinstance(data, list):
        return [_as_state_version_2(v) for v in data]
    if not isinstance(data, dict):
        return data
    out = {k: _as_state_version_2(v) for k, v in data.items() if k not in {"cost_micros", "max_cost_micros"}}
    if "cost_micros" in data:
        out["cost_usd"] = sum([0.1] * int(data.get("model_steps", 0)), 0.0)  # 0.1 + 0.2 style float sums
    if "max_cost_micros" in data or "max_model_steps" in data:
        out["max_cost_usd"] = 0.1 + 0.2 + 0.7  # 1.0000000000000002 as a float
    return out


def test_a_run_stored_with_float_dollars_and_string_kinds_loads_replays_and_streams(
    tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str
) -> None:
    run_id, args = pause_then_edit(
        tmp_path, sqlite_url, tool_host, ["UPDATE runs SET state_version = 2 WHERE run_id = :run_id"]
    )
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as db:
        rows = db.execute("SELECT seq, payload FROM run_events WHERE run_id = ?", (run_id,)).fetchall()
        for seq, payload in rows:
            old = json.dumps(_as_state_version_2(json.loads(payload)))
            db.execute("UPDATE run_events SET payload = ? WHERE run_id = ? AND seq = ?", (old, run_id, seq))
        usage, budgets = db.execute("SELECT usage, budgets FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        db.execute(
            "UPDATE runs SET usage = ?, budgets = ? WHERE run_id = ?",
            (
                json.dumps(_as_state_version_2(json.loads(usage))),
                json.dumps(_as_state_version_2(json.loads(budgets))),
                run_id,
            ),
        )
        kinds = db.execute(
            "SELECT json_extract(payload, '$.kind') FROM run_events WHERE run_id = ? AND type = ?",
            (run_id, "step.started"),
        ).fetchall()
    assert kinds and {k for (k,) in kinds} == {"model"}  # the log holds the core's words
    with spawn_runtime(args, cwd=tmp_path) as runtime, Client(runtime.address) as client:
        paused = client.get_run(run_id)  # read straight from the old row by the API
        old_events = [e for e in client.stream_events(run_id, timeout=60) if e.seq]
    steps_before = paused.usage.model_steps
    assert steps_before >= 1 and paused.usage.cost_micros == 100_000 * steps_before
    assert paused.budgets.max_cost_micros == 1_000_000
    started = [e.step_started for e in old_events if e.HasField("step_started")]
    assert started and all(s.kind == run_pb2.STEP_KIND_MODEL for s in started)
    assert started[-1].usage.cost_micros == 100_000 * (steps_before - 1)
    events, run = approve_and_follow(tmp_path, args, run_id)
    assert run.phase == run_pb2.RUN_PHASE_COMPLETED and state_version(sqlite_url, run_id) == STATE_VERSION
    # Replayed from the old log: the new steps (an unpriced model) add nothing to the exact sum.
    assert run.usage.cost_micros == 100_000 * steps_before and run.usage.model_steps > steps_before
    assert events[-1].run_ended.usage.cost_micros == 100_000 * steps_before
    assert all(e.step_started.kind == run_pb2.STEP_KIND_MODEL for e in events if e.HasField("step_started"))
