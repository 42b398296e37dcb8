"""A write's tool host dies after the effect and stays down: the run waits in UNKNOWN_OUTCOME.

Over real processes, with the reconcile backoff compressed 60 times (cap 1 s for 60 s, so 10 s
stand for 10 minutes): the wait costs no commit of the log while nothing changes, its claims grow
apart up to the cap, and the run settles within one interval of the host's return. With a short
run deadline, the wait outlives it: the run escalates (never FAILED) and, once settled, ends EXPIRED
saying what was done.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agentrt.client import Client
from agentrt.plugins.demo_tools import count_refunds
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import ToolHostProcess, start_tool_host
from agentrt.toolhost._faults import FAULT_ENV, FAULT_EXIT_CODE
from tests.fault.conftest import REFUND_SCRIPT, free_port, runtime_env, serve_fake_openai, start_runtime

PLUGINS = ["agentrt.plugins.demo_tools", "agentrt.plugins.fault_tools"]
COMPRESSION = 60  # 1 s of the test stands for a minute
CAP_S = 60 / COMPRESSION


def wait_until(check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def dying_host(tmp_path: Path, port: int, monkeypatch: pytest.MonkeyPatch) -> ToolHostProcess:
    """A tool host that applies the refund, then dies before it answers."""
    monkeypatch.setenv(FAULT_ENV, "after_effect:refund.issue")
    host = start_tool_host(tmp_path / "host", plugins=PLUGINS, listen=f"127.0.0.1:{port}")
    monkeypatch.delenv(FAULT_ENV)
    return host


def generation(db: Path, run_id: str) -> int:
    """The run's fencing generation: one more per claim."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return int(
            conn.execute("SELECT lease_generation FROM runs WHERE run_id = ?", (run_id,)).fetchone()[0]
        )


def test_a_parked_unknown_outcome_costs_no_commit_and_settles_within_one_interval_of_the_hosts_return(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    host = dying_host(tmp_path, port, monkeypatch)
    db = tmp_path / "rt.sqlite"
    with serve_fake_openai(REFUND_SCRIPT) as (_, model_url):
        env = runtime_env(
            db_url=f"sqlite:///{db}",
            tool_host=host.address,
            model_url=model_url,
            query_timeout_s=0.5,
            timeout_s=3600,
            reconcile={"base_s": 1 / COMPRESSION, "cap_s": CAP_S},
        )
        runtime = start_runtime(tmp_path, env)
        try:
            with Client(runtime.address) as client:
                run_id = client.start_run("refund", "refund A100").run_id
                assert host.wait(30) == FAULT_EXIT_CODE  # the refund landed, then the host died
                wait_until(lambda: client.get_run(run_id).phase == run_pb2.RUN_PHASE_UNKNOWN_OUTCOME)
                revision, claims = client.get_run(run_id).revision, generation(db, run_id)
                time.sleep(600 / COMPRESSION)  # "10 minutes" with the host down
                run = client.get_run(run_id)
                commits, claimed = run.revision - revision, generation(db, run_id) - claims
                print(
                    f"\n'10 min' ({600 / COMPRESSION:.0f}s, cap {CAP_S:.1f}s) in UNKNOWN_OUTCOME, host down: "
                    f"{commits} log commits, {claimed} claims (each a row write, as is its re-park)"
                )
                assert run.phase == run_pb2.RUN_PHASE_UNKNOWN_OUTCOME
                assert commits <= 1  # nothing new to record: re-parks are no commits of the log
                assert claimed <= 20  # about 15 at the cap: ~6 doubling up to it, then one a "minute"

                host.stop()  # releases the dead child's pipes
                host = start_tool_host(tmp_path / "host", plugins=PLUGINS, listen=f"127.0.0.1:{port}")
                back = time.time()
                events = [e for e in client.stream_events(run_id, follow=True, timeout=60) if e.seq]
            assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
            (settled,) = [e for e in events if e.HasField("tool_completed") and e.tool_completed.replayed]
            after = settled.time.ToDatetime().timestamp() - back
            print(f"settled {after:.2f}s after the host's return (one interval: {CAP_S:.1f}s)")
            assert after <= CAP_S + 1.0  # the interval, plus the claim poll and the query
            assert count_refunds(host.data_dir / "refunds.sqlite") == 1
        finally:
            runtime.close()
            host.stop()


def test_an_unknown_outcome_outliving_the_deadline_escalates_then_ends_expired_with_its_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    host = dying_host(tmp_path, port, monkeypatch)
    with serve_fake_openai(REFUND_SCRIPT) as (_, model_url):
        env = runtime_env(
            db_url=f"sqlite:///{tmp_path / 'rt.sqlite'}",
            tool_host=host.address,
            model_url=model_url,
            query_timeout_s=0.5,
            timeout_s=6,
            reconcile={"base_s": 0.05, "cap_s": 0.5},
            # Escalated, the queries spread out up to this cap (a day by default: a person is the
            # likelier answer then); kept short here so that the host's return is seen soon.
            escalation={"operator_wait_cap_s": 1.0},
        )
        runtime = start_runtime(tmp_path, env)
        try:
            with Client(runtime.address) as client:
                run_id = client.start_run("refund", "refund A100").run_id
                assert host.wait(30) == FAULT_EXIT_CODE
                wait_until(lambda: client.get_run(run_id).needs_attention)
                run = client.get_run(run_id)
                assert run.phase == run_pb2.RUN_PHASE_UNKNOWN_OUTCOME  # past its deadline, never FAILED
                assert run.deadline.ToDatetime().timestamp() <= time.time()
                assert [r.run_id for r in client.list_runs(needs_attention=True).runs] == [run_id]
                (escalated,) = [
                    e.run_escalated for e in client.stream_events(run_id) if e.HasField("run_escalated")
                ]
                assert escalated.reason == "unknown_outcome_past_deadline" and escalated.call_id

                host.stop()
                host = start_tool_host(tmp_path / "host", plugins=PLUGINS, listen=f"127.0.0.1:{port}")
                events = [e for e in client.stream_events(run_id, follow=True, timeout=60) if e.seq]
                ended = events[-1].run_ended
                assert ended.phase == run_pb2.RUN_PHASE_EXPIRED and ended.partial
                assert [c.tool for c in ended.completed_calls] == ["orders.lookup", "refund.issue"]
                assert list(ended.unknown_calls) == [] and list(ended.not_completed_calls) == []
                run = client.get_run(run_id)
                assert not run.needs_attention and list(run.completed_calls) == list(ended.completed_calls)
            assert count_refunds(host.data_dir / "refunds.sqlite") == 1
            assert runtime.counters()["escalated_count"] == 1  # scraped while it serves
            runtime.stop()
        finally:
            runtime.close()
            host.stop()
