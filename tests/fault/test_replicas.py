"""Runtime replicas on one PostgreSQL: takeover after a crash, fencing of a paused owner, cancels."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from agentrt.client import Client, event_type
from agentrt.plugins.demo_tools import count_refunds
from agentrt.plugins.fault_tools import count_slow_writes
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.testing import ToolHostProcess
from agentrt.toolhost._ledger import Ledger, OperationStatus
from tests.fault.conftest import REFUND_SCRIPT, runtime_env, serve_fake_openai, start_runtime

NAP_THEN_REFUND = {
    1: {"tool": "sleep.wait", "arguments": {"seconds": 2.0}},
    2: REFUND_SCRIPT[2],
    3: REFUND_SCRIPT[3],
}


def wait_for(address: str, run_id: str, wanted: str, timeout: float = 30.0) -> float:
    """Follow the run until an event of type ``wanted``; returns when it arrived."""
    with Client(address) as client:
        for event in client.stream_events(run_id, follow=True, timeout=timeout):
            if event_type(event) == wanted:
                return time.time()
    raise AssertionError(f"no {wanted}")


def test_a_replica_takes_over_after_the_owner_is_killed(
    tmp_path: Path, refund_host: ToolHostProcess, pg_url: str
) -> None:
    with serve_fake_openai(NAP_THEN_REFUND) as (_, model_url):
        env = runtime_env(db_url=pg_url, tool_host=refund_host.address, model_url=model_url)
        owner = start_runtime(tmp_path, env)
        standby = start_runtime(tmp_path, env)
        try:
            with Client(owner.address) as client:
                run_id = client.start_run("refund", "Please refund A100").run_id
            wait_for(owner.address, run_id, "tool.started")
            owner.kill()
            killed_at = time.time()
            with Client(standby.address) as client:
                events = [e for e in client.stream_events(run_id, follow=True, timeout=60) if e.seq]
            assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            # The standby waited out the dead owner's lease (TTL 1 s) before its first commit.
            after_kill = [e for e in events if e.time.ToMilliseconds() / 1000 > killed_at]
            assert after_kill and after_kill[0].time.ToMilliseconds() / 1000 >= killed_at + 0.5
            naps = [
                e.tool_started
                for e in events
                if e.HasField("tool_started") and e.tool_started.tool == "sleep.wait"
            ]
            assert len({n.idempotency_key for n in naps}) == 1  # re-sent under the same key
            assert count_refunds(refund_host.data_dir / "refunds.sqlite") == 1
        finally:
            owner.close()
            standby.close()


def test_a_paused_stale_owner_can_neither_commit_nor_cause_a_side_effect(
    tmp_path: Path, refund_host: ToolHostProcess, pg_url: str
) -> None:
    with serve_fake_openai(REFUND_SCRIPT) as (_, model_url):
        base = {"db_url": pg_url, "tool_host": refund_host.address, "model_url": model_url}
        # The owner freezes itself right before sending the refund (tool.started committed).
        stale = start_runtime(tmp_path, runtime_env(**base, fault="tool_before_send@2=stop"))
        try:
            with Client(stale.address) as client:
                run_id = client.start_run("refund", "Please refund A100").run_id
            deadline = time.monotonic() + 30
            while "stopping" not in stale.stderr_text():
                assert time.monotonic() < deadline, "the owner never paused"
                time.sleep(0.05)
            fresh = start_runtime(tmp_path, runtime_env(**base))
            try:
                with Client(fresh.address) as client:
                    events = [e for e in client.stream_events(run_id, follow=True, timeout=60) if e.seq]
                assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
                assert count_refunds(refund_host.data_dir / "refunds.sqlite") == 1
                last_seq = events[-1].seq
                # Wake the stale owner: it sends the refund with its old fencing token.
                os.kill(stale.process.pid, signal.SIGCONT)
                deadline = time.monotonic() + 30
                while "lease lost" not in stale.stderr_text().lower():
                    assert time.monotonic() < deadline, stale.stderr_text()[-2000:]
                    time.sleep(0.05)
                # On waking, two things race: the call goes out and the tool host refuses it (it has
                # seen the new owner's newer token), or the owner's renew loop finds the lease gone
                # first and stops the run before the call has left. Either way nothing happens twice.
                if "stopping it" not in stale.stderr_text():
                    deadline = time.monotonic() + 10
                    while "refused" not in stale.stderr_text():
                        assert time.monotonic() < deadline, stale.stderr_text()[-2000:]
                        time.sleep(0.05)
                    assert "fencing token 1" in stale.stderr_text()
                assert count_refunds(refund_host.data_dir / "refunds.sqlite") == 1
                with Client(fresh.address) as client:
                    assert client.get_run(run_id).last_seq == last_seq  # it committed nothing
                assert stale.counters()["lease_lost_count"] >= 1  # scraped while it serves
                stale.stop()
            finally:
                fresh.close()
        finally:
            if stale.process.poll() is None:
                os.kill(stale.process.pid, signal.SIGCONT)
            stale.close()


def test_a_cancel_asked_on_another_replica_reaches_the_owner(
    tmp_path: Path, refund_host: ToolHostProcess, pg_url: str
) -> None:
    with serve_fake_openai(NAP_THEN_REFUND) as (_, model_url):
        env = runtime_env(db_url=pg_url, tool_host=refund_host.address, model_url=model_url)
        owner = start_runtime(tmp_path, env)
        other = start_runtime(tmp_path, env)
        try:
            with Client(owner.address) as client:
                run_id = client.start_run("refund", "Please refund A100").run_id
            wait_for(owner.address, run_id, "tool.started")
            with Client(other.address) as client:
                asked = client.cancel_run(run_id, reason="asked elsewhere")
                assert asked.phase == run_pb2.RUN_PHASE_CANCEL_REQUESTED
                events = [e for e in client.stream_events(run_id, follow=True, timeout=30) if e.seq]
            assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_CANCELLED
            assert events[-1].run_ended.reason == "asked elsewhere"
            assert count_refunds(refund_host.data_dir / "refunds.sqlite") == 0
        finally:
            owner.close()
            other.close()


# -- three replicas: a crash is never a cancellation; a cancel is committed at once -------------------

SLOW_WRITE_THEN_DONE = {
    1: {"tool": "slow.write", "arguments": {"seconds": 3.0, "note": "refund A100"}},
    2: {"text": "Refunded A100."},
}
SLOW_TOOLS = ("slow.write",)


def key_of_started(address: str, run_id: str, tool: str) -> str:
    with Client(address) as client:
        for event in client.stream_events(run_id, follow=True, timeout=30):
            if event.HasField("tool_started") and event.tool_started.tool == tool:
                return event.tool_started.idempotency_key
    raise AssertionError(f"{tool} never started")


def wait_running_on_host(data_dir: Path, key: str) -> None:
    """Until the host's ledger has the call RUNNING: the request reached it."""
    deadline = time.monotonic() + 10
    while True:
        with Ledger(data_dir / "ledger.sqlite", owner="test-reader") as ledger:
            record = ledger.get(key)
        if record is not None:
            assert record.status is OperationStatus.RUNNING
            return
        assert time.monotonic() < deadline, "the write never reached the tool host"
        time.sleep(0.02)


@pytest.mark.parametrize("lease_ttl_s", [5.0, 1.0])
def test_kill_9_of_the_owner_during_a_slow_write_executes_it_once_and_never_says_cancelled(
    tmp_path: Path, refund_host: ToolHostProcess, pg_url: str, lease_ttl_s: float
) -> None:
    """The write body (3 s) outlasts the host's cancel grace (2 s). With a 5 s lease the next owner
    finds the write done in the ledger; with a 1 s lease it finds it running and reconciles."""
    with serve_fake_openai(SLOW_WRITE_THEN_DONE) as (fake, model_url):
        env = runtime_env(
            db_url=pg_url,
            tool_host=refund_host.address,
            model_url=model_url,
            tools=SLOW_TOOLS,
            lease_ttl_s=lease_ttl_s,
        )
        replicas = [start_runtime(tmp_path, env) for _ in range(3)]
        owner, survivors = replicas[0], replicas[1:]
        try:
            with Client(owner.address) as client:
                run_id = client.start_run("refund", "Please refund A100").run_id
            key = key_of_started(owner.address, run_id, "slow.write")
            wait_running_on_host(refund_host.data_dir, key)
            owner.kill()  # kill -9 while the write body runs
            with Client(survivors[0].address) as client:
                events = [e for e in client.stream_events(run_id, follow=True, timeout=90) if e.seq]
        finally:
            for replica in replicas:
                replica.close()
    types = [event_type(e) for e in events]
    effects = count_slow_writes(refund_host.data_dir, key)
    with Ledger(refund_host.data_dir / "ledger.sqlite", owner="test-reader") as ledger:
        record = ledger.get(key)
    assert record is not None
    print(
        f"\nkill -9 during a 3 s write, lease TTL {lease_ttl_s:g} s: effects={effects}, "
        f"host executions={record.executions}, ledger={record.status.value}, events={types}"
    )
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED, types
    assert effects == 1 and record.executions == 1 and record.status is OperationStatus.SUCCEEDED
    # The run was never cancelled, and never told so.
    assert "cancel.requested" not in types and "run.cancelled" not in types and "tool.failed" not in types
    (completed,) = [e.tool_completed for e in events if e.HasField("tool_completed")]
    assert json.loads(completed.result_json)["written"] == "refund A100"
    told = [m for m in fake.bodies[-1]["messages"] if m["role"] == "tool"]
    assert "CANCELLED" not in told[-1]["content"] and "refund A100" in told[-1]["content"]


@pytest.mark.parametrize("tool", ["slow.write", "slow.write_blocking"])
def test_cancel_run_on_the_owner_commits_cancel_requested_at_once_with_a_slow_write_in_flight(
    tmp_path: Path, refund_host: ToolHostProcess, pg_url: str, tool: str
) -> None:
    """slow.write stops when its host is asked to; slow.write_blocking (a sync body) cannot."""
    script = {1: {"tool": tool, "arguments": {"seconds": 3.0, "note": "refund A100"}}, 2: {"text": "x"}}
    with serve_fake_openai(script) as (_, model_url):
        env = runtime_env(db_url=pg_url, tool_host=refund_host.address, model_url=model_url, tools=(tool,))
        replicas = [start_runtime(tmp_path, env) for _ in range(3)]
        owner = replicas[0]
        try:
            with Client(owner.address) as client:
                run_id = client.start_run("refund", "Please refund A100").run_id
            key = key_of_started(owner.address, run_id, tool)
            wait_running_on_host(refund_host.data_dir, key)
            with Client(owner.address) as client:
                asked_at = time.time()
                client.cancel_run(run_id, reason="customer called back")
                events = [e for e in client.stream_events(run_id, follow=True, timeout=30) if e.seq]
            ended_at = time.time()
        finally:
            for replica in replicas:
                replica.close()
    types = [event_type(e) for e in events]
    (requested,) = [e for e in events if e.HasField("cancel_requested")]
    latency_ms = requested.time.ToMilliseconds() - asked_at * 1000
    effects = count_slow_writes(refund_host.data_dir, key)
    print(
        f"\nCancelRun to the owner with a 3 s {tool} in flight: cancel.requested committed "
        f"{latency_ms:.0f} ms after the request; run ended {ended_at - asked_at:.2f} s after it; "
        f"effects={effects}; events={types}"
    )
    assert latency_ms < 200, latency_ms
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_CANCELLED, types
    # Committed while the write was in flight, before its outcome; the outcome is then the real one.
    result = types.index("tool.failed" if tool == "slow.write" else "tool.completed")
    assert types.index("cancel.requested") < result
    if tool == "slow.write":  # asked to stop, it stopped before its effect, and said so
        (failed,) = [e.tool_failed for e in events if e.HasField("tool_failed")]
        assert failed.error.code == tool_pb2.TOOL_ERROR_CODE_CANCELLED
        assert effects == 0
    else:  # a sync body cannot be stopped: its effect is recorded, never claimed undone
        assert "tool.failed" not in types and effects == 1
