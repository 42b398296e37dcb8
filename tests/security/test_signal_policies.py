"""The two opt-in policies on people's decisions, through a secured deployment (TLS + tokens):
``own_runs_only`` (a runner cancels only its own runs) and four eyes (nobody approves a call of a
run it started). A refusal is PERMISSION_DENIED with ErrorInfo and changes nothing; the allowed
paths still work. With both off (the default) today's behaviour holds: see test_api_attacks."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import grpc
import pytest

from agentrt.client import Client, RPCError
from agentrt.proto.runtime.v1 import run_pb2
from tests.security.conftest import SecureStack, secure_stack
from tests.security.test_api_attacks import paused_run, refused


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    # The policies are decided from the run's row, the same on either database: SQLite only.
    root = tmp_path_factory.mktemp("strict")
    with secure_stack(
        root, f"sqlite:///{root / 'agentrt.sqlite'}", auth_config="own_runs_only = true\nfour_eyes = true\n"
    ) as running:
        yield running


def assert_denied(error: RPCError, reason: str, run_id: str) -> None:
    assert (error.code, error.reason) == (grpc.StatusCode.PERMISSION_DENIED, reason)
    assert error.metadata == {"run_id": run_id}


def unchanged(stack: SecureStack, run_id: str, before: run_pb2.Run) -> None:
    with stack.client("alice") as alice:
        after = alice.get_run(run_id)
    assert after.revision == before.revision and after.phase == before.phase
    assert after.pending_approval.approval_id == before.pending_approval.approval_id


def approve(client: Client, run: run_pb2.Run, *, approve: bool = True) -> run_pb2.Run:
    pending = run.pending_approval
    return client.resolve_approval(
        run.run_id,
        pending.approval_id,
        approve=approve,
        args_hash=pending.args_hash,
        expected_revision=run.revision,
    )


def followed(client: Client, run_id: str) -> list[run_pb2.RunEvent]:
    return [e for e in client.stream_events(run_id, follow=True, timeout=60) if e.seq]


def test_own_runs_only_a_runner_cannot_cancel_another_runners_run(strict: SecureStack) -> None:
    run_id, before = paused_run(strict, "alice")
    with strict.client("dave") as dave:
        assert_denied(refused(lambda: dave.cancel_run(run_id, reason="not mine")), "OWN_RUNS_ONLY", run_id)
        assert dave.get_run(run_id).phase == run_pb2.RUN_PHASE_WAITING_APPROVAL  # seeing stays open
    unchanged(strict, run_id, before)
    with strict.client("alice") as alice:
        alice.cancel_run(run_id, reason="mine")
        events = followed(alice, run_id)
    cancel = next(e.cancel_requested for e in events if e.HasField("cancel_requested"))
    assert cancel.requested_by == "alice" and events[-1].run_ended.phase == run_pb2.RUN_PHASE_CANCELLED


def test_own_runs_only_leaves_operators_cancelling_any_run(strict: SecureStack) -> None:
    run_id, _ = paused_run(strict, "alice")
    with strict.client("ops") as ops:
        ops.cancel_run(run_id, reason="operator stop")
        assert followed(ops, run_id)[-1].run_ended.phase == run_pb2.RUN_PHASE_CANCELLED


def test_own_runs_only_a_new_turn_cannot_interrupt_another_runners_session(strict: SecureStack) -> None:
    session = f"s-{uuid.uuid4().hex[:8]}"
    with strict.client("alice") as alice:
        events = list(alice.run_agent("refunder", "refund A100", session_id=session, timeout=60))
        run_id = events[0].run_id
        before = alice.get_run(run_id)
    assert before.phase == run_pb2.RUN_PHASE_WAITING_APPROVAL
    with strict.client("dave") as dave:
        error = refused(
            lambda: dave.start_run("refunder", "me first", session_id=session, session_policy="interrupt")
        )
        assert_denied(error, "OWN_RUNS_ONLY", run_id)
        assert [r.run_id for r in dave.list_runs(session_id=session).runs] == [run_id]  # none started
    unchanged(strict, run_id, before)
    with strict.client("alice") as alice:  # its own turn interrupts it
        second = alice.start_run(
            "refunder", "refund A100 again", session_id=session, session_policy="interrupt"
        )
        assert followed(alice, run_id)[-1].run_ended.phase == run_pb2.RUN_PHASE_CANCELLED
        alice.cancel_run(second.run_id, reason="clean up")
        followed(alice, second.run_id)


def test_four_eyes_nobody_approves_a_call_of_their_own_run(strict: SecureStack) -> None:
    refunds = strict.refunds()
    run_id, run = paused_run(strict, "erin")  # erin may start runs and approve calls
    with strict.client("erin") as erin:
        assert_denied(refused(lambda: approve(erin, run)), "FOUR_EYES", run_id)
    unchanged(strict, run_id, run)
    assert strict.refunds() == refunds
    with strict.client("bob") as bob:
        approve(bob, run)
        events = followed(bob, run_id)
    resolved = next(e.approval_resolved for e in events if e.HasField("approval_resolved"))
    assert resolved.approver == "bob" and events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
    assert strict.refunds() == refunds + 1


def test_four_eyes_leaves_rejecting_ones_own_call_and_approving_others_open(strict: SecureStack) -> None:
    own_id, own = paused_run(strict, "erin")
    with strict.client("erin") as erin:
        approve(erin, own, approve=False)
        events = followed(erin, own_id)
        assert any(e.HasField("approval_resolved") for e in events)
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED  # the model saw the rejection
        other_id, other = paused_run(strict, "alice")
        approve(erin, other)
        assert followed(erin, other_id)[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
