"""A PostgreSQL that drops every connection of the runtime's database every 200 ms for 5 s, while
10 runs each make 6 sequential ~300 ms writes: every run completes with no fault counted, every
write runs exactly once, and every GetRun asked meanwhile answers OK or UNAVAILABLE.

Real processes: a runtime on PostgreSQL, a tool host (its ledger on SQLite, untouched by the
blips), a fake model server. The terminations come from a separate admin connection, only for
the database of this test run.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest

from agentrt.client import Client, RPCError
from agentrt.plugins.fault_tools import count_slow_writes
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import ToolHostProcess
from tests.conftest import PG_ADMIN_URL
from tests.fault.conftest import follow_to_end, runtime_env, serve_fake_openai, start_runtime

RUNS = 10
WRITES = 6
BLIP_S = 5.0
EVERY_S = 0.2
SCRIPT: dict[int, dict[str, Any]] = {
    step: {"tool": "slow.write", "arguments": {"seconds": 0.3, "note": f"write {step}"}}
    for step in range(1, WRITES + 1)
}
SCRIPT[WRITES + 1] = {"text": "all written"}


class Terminator(threading.Thread):
    """Terminates every backend of one database, every ``every_s``, for ``for_s``."""

    def __init__(self, database: str, *, every_s: float, for_s: float):
        super().__init__(daemon=True)
        self.database = database
        self.every_s = every_s
        self.for_s = for_s
        self.terminated = 0
        self.rounds = 0
        self.done = threading.Event()

    def run(self) -> None:
        try:
            with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
                ends = time.monotonic() + self.for_s
                while time.monotonic() < ends:
                    rows = admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE datname = %s AND pid <> pg_backend_pid()",
                        (self.database,),
                    ).fetchall()
                    self.terminated += sum(1 for (ok,) in rows if ok)
                    self.rounds += 1
                    time.sleep(self.every_s)
        finally:
            self.done.set()


class Reader(threading.Thread):
    """Asks GetRun of every run, over and over, until told to stop; counts the answers' codes."""

    def __init__(self, address: str, run_ids: list[str], stop: threading.Event):
        super().__init__(daemon=True)
        self.address = address
        self.run_ids = run_ids
        self.stop = stop
        self.codes: Counter[str] = Counter()
        self.last: dict[str, run_pb2.Run] = {}  # each run as last read

    def all_ended(self) -> bool:
        terminal = (run_pb2.RUN_PHASE_COMPLETED, run_pb2.RUN_PHASE_FAILED, run_pb2.RUN_PHASE_EXPIRED)
        return len(self.last) == len(self.run_ids) and all(r.phase in terminal for r in self.last.values())

    def run(self) -> None:
        with Client(self.address) as client:
            while not self.stop.is_set():
                for run_id in self.run_ids:
                    try:
                        run = client.get_run(run_id)
                        self.codes["OK"] += 1
                        self.last[run_id] = run
                    except RPCError as exc:
                        self.codes[exc.code.name] += 1
                time.sleep(0.02)


@pytest.mark.postgres
def test_runs_complete_through_a_database_that_drops_its_connections(
    tmp_path: Path, refund_host: ToolHostProcess, pg_url: str, pg_database: str
) -> None:
    with serve_fake_openai(SCRIPT) as (_, model_url):
        env = runtime_env(
            db_url=pg_url,
            tool_host=refund_host.address,
            model_url=model_url,
            tools=("slow.write",),
            timeout_s=120,
            lease_ttl_s=15.0,  # the default: a 5 s blip is shorter than a lease
        )
        agents = json.loads(env["AGENTRT_AGENTS"])
        agents["refund"]["budgets"]["max_model_steps"] = WRITES + 2
        env["AGENTRT_AGENTS"] = json.dumps(agents)
        runtime = start_runtime(tmp_path, env)
        try:
            with Client(runtime.address) as client:
                run_ids = [client.start_run("refund", f"write batch {i}").run_id for i in range(RUNS)]
            stop = threading.Event()
            reader = Reader(runtime.address, run_ids, stop)
            terminator = Terminator(pg_database.rsplit("/", 1)[1], every_s=EVERY_S, for_s=BLIP_S)
            reader.start()
            terminator.start()
            try:
                # Followed by GetRun only: a follow stream that meets the blip ends UNAVAILABLE (the
                # client resumes it after its last seq); the runs' logs are read once they ended.
                deadline = time.monotonic() + 120
                while not (reader.all_ended() and terminator.done.is_set()) and time.monotonic() < deadline:
                    time.sleep(0.1)
            finally:
                stop.set()
                reader.join(30)
            ended = [follow_to_end(runtime.address, run_id, timeout=30) for run_id in run_ids]
            with Client(runtime.address) as client:
                runs = [client.get_run(run_id) for run_id in run_ids]
            counters = runtime.counters()  # scraped while it serves
            runtime.stop()
        finally:
            runtime.close()
    assert terminator.terminated >= terminator.rounds // 2 > 0  # the blips really cut connections
    phases = [run_pb2.RunPhase.Name(r.phase) for r in runs]
    assert phases == ["RUN_PHASE_COMPLETED"] * RUNS, [(r.phase, r.reason) for r in runs]
    assert [r.fault_count for r in runs] == [0] * RUNS
    assert all(events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED for events in ended)
    assert counters["run_fault_count"] == 0
    # Every write ran exactly once: one effect per idempotency key, six per run.
    keys = [e.tool_started.idempotency_key for events in ended for e in events if e.HasField("tool_started")]
    assert len(set(keys)) == RUNS * WRITES
    assert all(count_slow_writes(refund_host.data_dir, key) == 1 for key in set(keys))
    assert count_slow_writes(refund_host.data_dir) == RUNS * WRITES
    # Every GetRun meanwhile: OK, or UNAVAILABLE while the store was away; never UNKNOWN or INTERNAL.
    assert set(reader.codes) <= {"OK", grpc.StatusCode.UNAVAILABLE.name}, reader.codes
    assert reader.codes["OK"] > 0
    print(
        f"blips: {terminator.rounds} rounds, {terminator.terminated} backends terminated; "
        f"GetRun answers: {dict(reader.codes)}; environmental faults retried: "
        f"{counters['environmental_fault_count']}; leases lost: {counters['lease_lost_count']}"
    )
