"""The SQLite database on a small filesystem that fills up while runs are in flight: StartRun
answers RESOURCE_EXHAUSTED (or UNAVAILABLE), never INTERNAL; the runs in flight wait, without a
fault counted, and complete once space returns; the database is intact.

The filesystem is a real 8 MiB tmpfs mounted for the test (this needs root, as CI has here);
under ``CI=true`` a failed mount fails the test instead of skipping it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sqlite3
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentrt.client import Client, RPCError
from agentrt.plugins.fault_tools import count_slow_writes
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import ToolHostProcess
from tests.fault.conftest import follow_to_end, runtime_env, serve_fake_openai, start_runtime

RUNS = 3
WRITES = 4
SCRIPT: dict[int, dict[str, Any]] = {
    step: {"tool": "slow.write", "arguments": {"seconds": 0.5, "note": f"write {step}"}}
    for step in range(1, WRITES + 1)
}
SCRIPT[WRITES + 1] = {"text": "all written"}
TERMINAL = (run_pb2.RUN_PHASE_COMPLETED, run_pb2.RUN_PHASE_FAILED, run_pb2.RUN_PHASE_EXPIRED)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs, unmounted at the end whatever happened."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        reason = f"cannot mount a tmpfs: {mounted.stderr.strip()}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill(disk: Path) -> Path:
    """Write zeros until the filesystem is full; the file to delete to free it again."""
    filler = disk / "filler"
    chunk = b"\0" * 65536
    with open(filler, "wb", buffering=0) as out:
        with contextlib.suppress(OSError):
            while True:
                out.write(chunk)
        with contextlib.suppress(OSError):  # the last few bytes, a page at a time
            while True:
                out.write(b"\0" * 4096)
    with pytest.raises(OSError) as full, open(disk / "probe", "wb", buffering=0) as probe:
        probe.write(chunk)
    assert full.value.errno == errno.ENOSPC
    return filler


def _all_ended(client: Client, run_ids: list[str]) -> list[run_pb2.Run] | None:
    runs = [client.get_run(run_id) for run_id in run_ids]
    return runs if all(r.phase in TERMINAL for r in runs) else None


def test_a_full_disk_refuses_new_runs_and_the_runs_in_flight_complete_once_space_returns(
    tmp_path: Path, refund_host: ToolHostProcess, small_disk: Path
) -> None:
    with serve_fake_openai(SCRIPT) as (_, model_url):
        env = runtime_env(
            db_url=f"sqlite:///{small_disk / 'agentrt.sqlite'}",
            tool_host=refund_host.address,
            model_url=model_url,
            tools=("slow.write",),
            timeout_s=120,
            lease_ttl_s=15.0,
        )
        agents = json.loads(env["AGENTRT_AGENTS"])
        agents["refund"]["budgets"]["max_model_steps"] = WRITES + 2
        env["AGENTRT_AGENTS"] = json.dumps(agents)
        runtime = start_runtime(tmp_path, env)
        try:
            with Client(runtime.address) as client:
                run_ids = [client.start_run("refund", f"batch {i}").run_id for i in range(RUNS)]
                for run_id in run_ids:  # each run is in flight, past its first write
                    _poll(lambda r=run_id: client.get_run(r).usage.tool_calls >= 1)  # type: ignore[misc]
                filler = _fill(small_disk)
                answers: Counter[str] = Counter()
                for _ in range(20):
                    try:
                        client.start_run("refund", "one more")
                        answers["OK"] += 1
                    except RPCError as exc:
                        answers[exc.code.name] += 1
                    time.sleep(0.1)
                held_s = 3.0
                time.sleep(held_s)  # the runs in flight meet the full disk too
                stuck = [r for r in (client.get_run(i) for i in run_ids) if r.phase not in TERMINAL]
                filler.unlink()
                (small_disk / "probe").unlink(missing_ok=True)
                runs = _poll(lambda: _all_ended(client, run_ids), timeout_s=90)
            ended = [follow_to_end(runtime.address, run_id, timeout=30) for run_id in run_ids]
            counters = runtime.counters()  # scraped while it serves
            runtime.stop()
        finally:
            runtime.close()
    assert answers.total() > answers["OK"], f"no StartRun was refused, the disk never looked full: {answers}"
    # Never INTERNAL or UNKNOWN. (SQLite could take a commit into space its files already hold.)
    assert set(answers) - {"OK"} <= {"RESOURCE_EXHAUSTED", "UNAVAILABLE"}, answers
    assert len(stuck) == RUNS  # they waited for space, they did not end
    assert [r.phase for r in runs] == [run_pb2.RUN_PHASE_COMPLETED] * RUNS, [
        (r.phase, r.reason) for r in runs
    ]
    assert [r.fault_count for r in runs] == [0] * RUNS and counters["run_fault_count"] == 0
    assert counters["environmental_fault_count"] > 0
    keys = {e.tool_started.idempotency_key for events in ended for e in events if e.HasField("tool_started")}
    assert len(keys) == RUNS * WRITES
    assert all(count_slow_writes(refund_host.data_dir, key) == 1 for key in keys)  # each exactly once
    with sqlite3.connect(small_disk / "agentrt.sqlite") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    print(
        f"StartRun on the full disk: {dict(answers)}; environmental faults retried: "
        f"{counters['environmental_fault_count']}"
    )


def _poll(check: Any, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout_s}s")
