"""GetRunDiagnostics names what a run waits for outside itself, over a real demo runtime: a
person's approval (the call waiting, the expiry that wakes it), and an earlier turn of its
session (the queued run names the run it waits behind), then nothing once it can go on."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from agentrt.client import Client
from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2
from agentrt.testing import spawn_runtime


def wait_for(check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_a_run_waiting_for_a_person_and_one_queued_behind_it_in_its_session(tmp_path: Path) -> None:
    with (
        spawn_runtime(["--demo", "--listen", "127.0.0.1:0"], cwd=tmp_path) as runtime,
        Client(runtime.address) as client,  # the demo trusts loopback callers: every role
    ):
        first = client.start_run("refund-demo", "refund A100", session_id="s-1").run_id
        wait_for(lambda: client.get_run(first).phase == run_pb2.RUN_PHASE_WAITING_APPROVAL)
        queued = client.start_run("refund-demo", "and B200", session_id="s-1", session_policy="enqueue")
        assert queued.phase == run_pb2.RUN_PHASE_QUEUED

        paused = client.get_run_diagnostics(first)
        approval = client.get_run(first).pending_approval
        assert paused.waiting.reason == run_pb2.WAIT_REASON_APPROVAL
        assert paused.waiting.detail == approval.approval_id
        (call,) = paused.pending_calls
        assert (call.tool, call.state, call.attempts) == (
            "refund.issue",
            runtime_service_pb2.PENDING_CALL_STATE_WAITING_APPROVAL,
            0,
        )
        assert paused.lease_owner == "" and paused.HasField("wake_time")
        # Its expiry wakes it, or its escalation to an operator if that comes first.
        assert paused.wake_time.ToMilliseconds() <= approval.expire_time.ToMilliseconds()
        assert paused.wake_time.ToMilliseconds() > time.time() * 1000

        behind = client.get_run_diagnostics(queued.run_id)
        assert behind.phase == run_pb2.RUN_PHASE_QUEUED
        assert (behind.waiting.reason, behind.waiting.detail) == (run_pb2.WAIT_REASON_SESSION_QUEUE, first)
        assert list(behind.pending_calls) == [] and not behind.HasField("last_error")

        client.cancel_run(first, reason="let the next turn go")
        wait_for(lambda: client.get_run(queued.run_id).phase != run_pb2.RUN_PHASE_QUEUED)
        ended = client.get_run_diagnostics(first)
        assert ended.phase == run_pb2.RUN_PHASE_CANCELLED
        assert not ended.HasField("waiting") and list(ended.pending_calls) == []
        assert not ended.HasField("wake_time") and ended.lease_owner == ""
        moving = client.get_run_diagnostics(queued.run_id)
        assert moving.waiting.reason != run_pb2.WAIT_REASON_SESSION_QUEUE
