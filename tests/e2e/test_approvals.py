"""Approvals (DESIGN §7) through real processes: pause, survive a restart, approve, reject, expire."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest

from agentrt.client import Client, RPCError, cli, event_type
from agentrt.plugins.demo_tools import count_refunds
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import ToolHostProcess, spawn_runtime
from tests.e2e.conftest import agent_toml

STEPS = [
    {"text": "checking", "tool_calls": [{"tool": "orders.lookup", "arguments": {"order_id": "A100"}}]},
    {
        "text": "refunding",
        "tool_calls": [
            {"tool": "refund.issue", "arguments": {"order_id": "A100", "amount": 30.0, "reason": "broken"}}
        ],
    },
    {"text": "Handled the refund request."},
]


def config(tmp_path: Path, sqlite_url: str, tool_host: ToolHostProcess) -> Path:
    text = f'db_url = "{sqlite_url}"\npoll_interval_s = 0.1\n'
    text += f'[[tool_hosts]]\nname = "local"\naddress = "{tool_host.address}"\n'
    for name, approvals in (
        ("refunder", ""),
        ("strict", 'approvals = { timeout_s = 1.0, on_expiry = "fail" }\n'),
        ("patient", 'approvals = { timeout_s = 1.0, on_expiry = "reask" }\n'),
    ):
        text += agent_toml(
            name, steps=STEPS, tools=["orders.lookup", "refund.issue"], budgets={"timeout_s": 60}
        )
        text += approvals
    path = tmp_path / "approvals.toml"
    path.write_text(text)
    return path


def refunds(tool_host: ToolHostProcess) -> int:
    path = tool_host.data_dir / "refunds.sqlite"
    return count_refunds(path) if path.exists() else 0


def start_until_paused(client: Client, agent: str) -> tuple[str, run_pb2.ApprovalRequested]:
    events = list(client.run_agent(agent, "refund A100 please", timeout=60))
    # RunAgent ends where the run waits for a person: the stream-only run.waiting says so.
    assert [event_type(e) for e in events[-2:]] == ["approval.requested", "run.waiting"], [
        event_type(e) for e in events
    ]
    assert events[-1].run_waiting.detail == events[-2].approval_requested.approval_id
    return events[0].run_id, events[-2].approval_requested


def test_an_approval_pause_survives_a_restart_and_resumes_the_same_run(
    tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str
) -> None:
    path = config(tmp_path, sqlite_url, tool_host)
    args = ["--config", str(path), "--listen", "127.0.0.1:0"]
    with spawn_runtime(args, cwd=tmp_path) as runtime, Client(runtime.address) as client:
        run_id, approval = start_until_paused(client, "refunder")
        assert approval.tool == "refund.issue" and len(approval.args_hash) == 64
        assert '"amount":30.0' in approval.arguments_json and approval.policy_version == "refund-limit-1"
        assert "refund" in approval.impact_summary.lower() or "would" in approval.impact_summary.lower()
        run = client.get_run(run_id)
        assert run.phase == run_pb2.RUN_PHASE_WAITING_APPROVAL
        assert run.pending_approval.approval_id == approval.approval_id
        revision = run.revision
    assert refunds(tool_host) == 0

    with spawn_runtime(args, cwd=tmp_path) as runtime, Client(runtime.address) as client:
        refusals = [
            (
                dict(args_hash="0" * 64, expected_revision=revision),
                grpc.StatusCode.FAILED_PRECONDITION,
                "ARGS_HASH_MISMATCH",
            ),
            (
                dict(args_hash=approval.args_hash, expected_revision=revision - 1),
                grpc.StatusCode.ABORTED,
                "STALE_REVISION",
            ),
        ]
        for kwargs, code, reason in refusals:
            with pytest.raises(RPCError) as info:
                client.resolve_approval(run_id, approval.approval_id, approve=True, **kwargs)  # type: ignore[arg-type]
            assert (info.value.code, info.value.reason) == (code, reason)
        with pytest.raises(RPCError) as info:
            client.resolve_approval(
                run_id,
                "not-the-approval",
                approve=True,
                args_hash=approval.args_hash,
                expected_revision=revision,
            )
        assert info.value.code == grpc.StatusCode.NOT_FOUND
        assert client.get_run(run_id).revision == revision and refunds(tool_host) == 0

        client.resolve_approval(
            run_id,
            approval.approval_id,
            approve=True,
            args_hash=approval.args_hash,
            expected_revision=revision,
            comment="looks right",
        )
        events = [e for e in client.stream_events(run_id, follow=True, timeout=60) if e.seq]
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
        resolved = [e.approval_resolved for e in events if e.HasField("approval_resolved")]
        assert len(resolved) == 1 and resolved[0].decision == run_pb2.APPROVAL_DECISION_APPROVE
        refund_starts = [
            e.tool_started
            for e in events
            if e.HasField("tool_started") and e.tool_started.tool == "refund.issue"
        ]
        assert len(refund_starts) == 1 and refund_starts[0].attempt == 1
        assert [r.run_id for r in client.list_runs().runs] == [run_id]  # the same run; no new turn
        assert refunds(tool_host) == 1


def test_a_rejected_call_never_runs_and_the_model_sees_the_rejection(
    tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config(tmp_path, sqlite_url, tool_host)
    with (
        spawn_runtime(["--config", str(path), "--listen", "127.0.0.1:0"], cwd=tmp_path) as runtime,
        Client(runtime.address) as client,
    ):
        run_id, approval = start_until_paused(client, "refunder")
        # An operator finds the pause and rejects it from the CLI.
        assert cli.main(["--target", runtime.address, "approvals"]) == 0
        listed = capsys.readouterr().out
        assert run_id in listed and approval.approval_id in listed and approval.args_hash in listed
        reject = [
            "--target",
            runtime.address,
            "reject",
            run_id,
            approval.approval_id,
            "--comment",
            "not eligible",
        ]
        assert cli.main(reject) == 0
        events = [e for e in client.stream_events(run_id, follow=True, timeout=60) if e.seq]
        failed = [e.tool_failed for e in events if e.HasField("tool_failed")]
        assert len(failed) == 1
        assert "rejected" in failed[0].error.message and "not eligible" in failed[0].error.message
        assert not any(e.HasField("tool_started") and e.tool_started.tool == "refund.issue" for e in events)
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
        assert refunds(tool_host) == 0


def test_an_expired_approval_is_not_executable_and_the_policy_decides_what_follows(
    tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str
) -> None:
    path = config(tmp_path, sqlite_url, tool_host)
    with (
        spawn_runtime(["--config", str(path), "--listen", "127.0.0.1:0"], cwd=tmp_path) as runtime,
        Client(runtime.address) as client,
    ):
        strict_id, strict = start_until_paused(client, "strict")
        patient_id, patient = start_until_paused(client, "patient")
        time.sleep(1.2)  # both approvals expire (timeout_s = 1)
        with pytest.raises(RPCError) as info:
            client.resolve_approval(
                strict_id,
                strict.approval_id,
                approve=True,
                args_hash=strict.args_hash,
                expected_revision=client.get_run(strict_id).revision,
            )
        assert info.value.reason in ("APPROVAL_EXPIRED", "RUN_NOT_WAITING_APPROVAL")
        ended = [e for e in client.stream_events(strict_id, follow=True, timeout=30) if e.seq]
        assert ended[-1].run_ended.phase == run_pb2.RUN_PHASE_FAILED
        assert ended[-1].run_ended.reason == "approval_expired"
        deadline = time.monotonic() + 15
        while True:
            run = client.get_run(patient_id)
            if run.pending_approval.approval_id and run.pending_approval.approval_id != patient.approval_id:
                break
            assert time.monotonic() < deadline, "the expired approval was not asked again"
            time.sleep(0.05)
        assert run.phase == run_pb2.RUN_PHASE_WAITING_APPROVAL
        assert run.pending_approval.args_hash == patient.args_hash
        client.cancel_run(patient_id, reason="done testing")
        assert refunds(tool_host) == 0


@pytest.mark.parametrize("approve", [True, False])
def test_a_spent_budget_pauses_for_a_person_when_the_agent_says_so(
    tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str, approve: bool
) -> None:
    lookups = [
        {"text": "checking", "tool_calls": [{"tool": "orders.lookup", "arguments": {"order_id": f"A10{i}"}}]}
        for i in range(2)
    ]
    text = f'db_url = "{sqlite_url}"\n[[tool_hosts]]\nname = "local"\naddress = "{tool_host.address}"\n'
    text += agent_toml(
        "careful",
        steps=[*lookups, {"text": "both checked"}],
        tools=["orders.lookup"],
        budgets={"max_tool_calls": 1},
    )
    text += 'on_budget_exhausted = "pause"\n'
    path = tmp_path / "budget.toml"
    path.write_text(text)
    with (
        spawn_runtime(["--config", str(path), "--listen", "127.0.0.1:0"], cwd=tmp_path) as runtime,
        Client(runtime.address) as client,
    ):
        run_id, pause = start_until_paused(client, "careful")
        assert pause.tool == "budget.tool_calls" and pause.call_id == ""
        assert '"grant":2' in pause.arguments_json and "raises it to 2" in pause.impact_summary
        run = client.get_run(run_id)
        client.resolve_approval(
            run_id,
            pause.approval_id,
            approve=approve,
            args_hash=pause.args_hash,
            expected_revision=run.revision,
        )
        events = [e for e in client.stream_events(run_id, follow=True, timeout=60) if e.seq]
        final = client.get_run(run_id)
    started = [e for e in events if e.HasField("tool_started")]
    if approve:
        assert final.phase == run_pb2.RUN_PHASE_COMPLETED and final.budgets.max_tool_calls == 2
        assert len(started) == 2
    else:
        assert final.phase == run_pb2.RUN_PHASE_FAILED and final.reason == "budget_exhausted:tool_calls"
        assert len(started) == 1


def test_resolving_needs_a_decision_and_a_waiting_run_and_records_the_principal(
    tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str
) -> None:
    # Roles and tenants are exercised in tests/security; on loopback with no auth configured
    # every caller is the local principal, and the approver recorded is that principal.
    from agentrt.proto.runtime.v1 import runtime_service_pb2, runtime_service_pb2_grpc

    path = config(tmp_path, sqlite_url, tool_host)
    with spawn_runtime(["--config", str(path), "--listen", "127.0.0.1:0"], cwd=tmp_path) as runtime:
        with Client(runtime.address) as client:
            run_id, approval = start_until_paused(client, "refunder")
            revision = client.get_run(run_id).revision
        with grpc.insecure_channel(runtime.address) as channel:
            stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channel)
            unspecified = runtime_service_pb2.ResolveApprovalRequest(
                run_id=run_id,
                approval_id=approval.approval_id,
                args_hash=approval.args_hash,
                expected_revision=revision,
            )
            with pytest.raises(grpc.RpcError) as raw:
                # A forged approver header means nothing: the approver is the authenticated principal.
                stub.ResolveApproval(unspecified, timeout=10, metadata=[("x-agentrt-approver", "alice")])
            assert raw.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            with pytest.raises(grpc.RpcError) as raw:
                stub.ResolveOutcome(
                    runtime_service_pb2.ResolveOutcomeRequest(
                        run_id=run_id,
                        call_id="call_2_0",
                        decision=runtime_service_pb2.OUTCOME_DECISION_FAILED,
                        expected_revision=revision,
                    ),
                    timeout=10,
                )
            assert raw.value.code() == grpc.StatusCode.FAILED_PRECONDITION  # not in UNKNOWN_OUTCOME
        with Client(runtime.address, metadata=[("x-agentrt-approver", "alice")]) as alice:  # ignored
            assert alice.get_run(run_id).revision == revision  # every refusal changed nothing
            alice.resolve_approval(
                run_id,
                approval.approval_id,
                approve=True,
                args_hash=approval.args_hash,
                expected_revision=revision,
            )
            events = [e for e in alice.stream_events(run_id, follow=True, timeout=60) if e.seq]
            resolved = next(e.approval_resolved for e in events if e.HasField("approval_resolved"))
            assert resolved.approver == "local"
            with pytest.raises(RPCError) as info:  # the run no longer waits
                alice.resolve_approval(
                    run_id,
                    approval.approval_id,
                    approve=True,
                    args_hash=approval.args_hash,
                    expected_revision=events[-1].seq,
                )
            assert info.value.reason == "RUN_NOT_WAITING_APPROVAL"
    assert refunds(tool_host) == 1
