"""Retention through real processes (DESIGN R8.4): the server's job and ``agentrt prune`` turn old
ended runs into tombstones; the API answers for them as the README documents."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentrt.client import Client, FailedPreconditionError
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import RuntimeProcess, ToolHostProcess, spawn_runtime
from tests.e2e.conftest import write_config

ROOT = Path(__file__).resolve().parents[2]


def agentrt(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    child_env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "agentrt.client", *args],
        cwd=cwd,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def finish(client: Client, *, request_key: str = "") -> run_pb2.Run:
    events = [e for e in client.run_agent("refund", "refund A100", request_key=request_key, timeout=60)]
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
    return client.get_run(events[0].run_id)


def assert_tombstone(client: Client, run: run_pb2.Run, *, request_key: str) -> None:
    tomb = client.get_run(run.run_id)
    assert tomb.HasField("prune_time")
    assert tomb.phase == run_pb2.RUN_PHASE_COMPLETED and tomb.reason == run.reason
    assert tomb.usage == run.usage and tomb.last_seq == run.last_seq and tomb.fault_count == 0
    assert tomb.input == "" and tomb.output == ""
    listed = {r.run_id: r for r in client.list_runs().runs}
    assert listed[run.run_id].HasField("prune_time")
    for follow in (False, True):
        with pytest.raises(FailedPreconditionError) as caught:
            list(client.stream_events(run.run_id, follow=follow, timeout=10))
        assert caught.value.reason == "RUN_PRUNED" and caught.value.metadata["run_id"] == run.run_id
    # The same request key finds the tombstone, never a fresh run.
    again = client.start_run("refund", "refund A100", request_key=request_key)
    assert again.run_id == run.run_id and again.HasField("prune_time")
    with pytest.raises(FailedPreconditionError) as caught:
        list(client.run_agent("refund", "refund A100", request_key=request_key, timeout=10))
    assert caught.value.reason == "RUN_PRUNED"


def test_agentrt_prune_dry_run_reports_and_changes_nothing_then_prunes(
    runtime: RuntimeProcess, tmp_path: Path
) -> None:
    config = tmp_path / "agentrt.toml"
    with Client(runtime.address) as client:
        run = finish(client, request_key="k-1")
        young_enough = {"AGENTRT_RETENTION__ENDED_AFTER_S": "3600"}
        result = agentrt("prune", "--dry-run", "--config", str(config), cwd=tmp_path, env=young_enough)
        assert result.returncode == 0, result.stderr
        assert "tenant=TOTAL runs=0 " in result.stdout

        due = {"AGENTRT_RETENTION__ENDED_AFTER_S": "0.001"}
        dry = agentrt("prune", "--dry-run", "--config", str(config), cwd=tmp_path, env=due)
        assert dry.returncode == 0, dry.stderr
        assert dry.stdout.startswith("dry run: would delete (per tenant):")
        line = f"tenant=default runs=1 events={run.last_seq} signals=0 checkpoints=0 payloads=0"
        assert line in dry.stdout
        # Nothing changed: the run still streams every event.
        assert not client.get_run(run.run_id).HasField("prune_time")
        assert len(list(client.stream_events(run.run_id, timeout=10))) == run.last_seq

        real = agentrt("prune", "--config", str(config), cwd=tmp_path, env=due)
        assert real.returncode == 0, real.stderr
        assert real.stdout.startswith("deleted (per tenant):") and line in real.stdout
        assert_tombstone(client, run, request_key="k-1")

        again = agentrt("prune", "--config", str(config), cwd=tmp_path, env=due)
        assert "tenant=TOTAL runs=0 " in again.stdout


def test_agentrt_prune_without_retention_or_database_says_so(tmp_path: Path) -> None:
    config = tmp_path / "agentrt.toml"
    config.write_text(f'db_url = "sqlite:///{tmp_path / "absent.sqlite"}"\n')
    result = agentrt("prune", "--dry-run", "--config", str(config), cwd=tmp_path)
    assert result.returncode == 0 and "retention is not configured" in result.stdout
    result = agentrt(
        "prune", "--config", str(config), cwd=tmp_path, env={"AGENTRT_RETENTION__ENDED_AFTER_S": "60"}
    )
    assert result.returncode == 2 and "no database file at" in result.stderr
    assert not (tmp_path / "absent.sqlite").exists()
    bad = agentrt(
        "prune", "--config", str(config), cwd=tmp_path, env={"AGENTRT_RETENTION__ENDED_AFTER_S": "-1"}
    )
    assert bad.returncode == 2 and "retention.ended_after_s" in bad.stderr


@pytest.fixture
def pruning_runtime(tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str) -> Iterator[RuntimeProcess]:
    config = write_config(tmp_path / "agentrt.toml", db_url=sqlite_url, tool_host_address=tool_host.address)
    with config.open("a") as fh:
        fh.write("[retention]\nended_after_s = 0.5\ninterval_s = 0.2\n")
    with spawn_runtime(["--config", str(config), "--listen", "127.0.0.1:0"], cwd=tmp_path) as process:
        yield process


def test_the_servers_job_prunes_ended_runs_and_leaves_running_ones(pruning_runtime: RuntimeProcess) -> None:
    with Client(pruning_runtime.address) as client:
        sleeper = client.start_run("sleeper", "nap")  # waits 30 s in a tool: active the whole test
        run = finish(client, request_key="k-2")
        deadline = time.monotonic() + 20
        while not client.get_run(run.run_id).HasField("prune_time"):
            assert time.monotonic() < deadline, "the retention job never pruned the ended run"
            time.sleep(0.1)
        assert_tombstone(client, run, request_key="k-2")
        active = client.get_run(sleeper.run_id)
        assert not active.HasField("prune_time") and active.input == "nap"
        assert list(client.stream_events(sleeper.run_id, timeout=10))


@pytest.mark.parametrize(
    "db_url, message",
    [
        ("sqlite:///{tmp}/empty.sqlite", "no agentrt schema yet (head is"),
        ("mysql://user:hunter2@db/agentrt", "unusable db_url (ValueError)"),
    ],
)
def test_agentrt_prune_on_an_unusable_store_fails_clearly(tmp_path: Path, db_url: str, message: str) -> None:
    (tmp_path / "empty.sqlite").write_bytes(b"")  # a file without the schema
    url = db_url.format(tmp=tmp_path)
    env = {"AGENTRT_RETENTION__ENDED_AFTER_S": "60"}
    result = agentrt("prune", "--dry-run", "--db-url", url, cwd=tmp_path, env=env)
    assert result.returncode == 2 and message in result.stderr
    assert "hunter2" not in result.stderr and "Traceback" not in result.stderr
