"""Two runtime replicas on one PostgreSQL: takeover after a crash, and fencing of a paused owner."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from agentrt.client import Client, event_type
from agentrt.plugins.demo_tools import count_refunds
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import ToolHostProcess
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
                # The tool host itself refused the call: it had seen the new owner's newer token.
                assert "refused" in stale.stderr_text() and "fencing token 1" in stale.stderr_text()
                assert count_refunds(refund_host.data_dir / "refunds.sqlite") == 1
                with Client(fresh.address) as client:
                    assert client.get_run(run_id).last_seq == last_seq  # it committed nothing
                stale.stop()
                assert stale.counters()["lease_lost_count"] == 1
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
