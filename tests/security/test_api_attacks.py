"""Attacks on the runtime API through a secured deployment (TLS + bearer tokens), each refused
with the right status and nothing written or run; and the allowed paths still working."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentrt.client import Client, RPCError, event_type
from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2, runtime_service_pb2_grpc
from agentrt.proto.toolhost.v1 import tool_pb2
from tests.security.conftest import SecureStack

GRPCURL = str(Path(sys.executable).parent / "grpcurl")
SERVICE = "agentrt.runtime.v1.AgentRuntimeService"


def refused(call: Callable[[], Any]) -> RPCError:
    with pytest.raises(RPCError) as info:
        call()
    return info.value


def paused_run(stack: SecureStack, who: str = "alice") -> tuple[str, run_pb2.Run]:
    """A refund run of ``who`` waiting for approval (the refund is over the policy's limit)."""
    with stack.client(who) as client:
        events = list(client.run_agent("refunder", "refund A100 please", timeout=60))
        assert event_type(events[-2]) == "approval.requested", [event_type(e) for e in events]
        assert events[-1].run_waiting.reason == run_pb2.WAIT_REASON_APPROVAL
        run = client.get_run(events[0].run_id)
    return run.run_id, run


def raw_calls(stub: runtime_service_pb2_grpc.AgentRuntimeServiceStub, run_id: str) -> dict[str, Any]:
    """Every RPC of the service, as a thunk that sends it with whatever metadata it is given."""
    return {
        "RunAgent": lambda md: list(
            stub.RunAgent(runtime_service_pb2.RunAgentRequest(agent_name="refunder", input="x"), metadata=md)
        ),
        "StartRun": lambda md: stub.StartRun(
            runtime_service_pb2.StartRunRequest(agent_name="refunder", input="x"), metadata=md
        ),
        "GetRun": lambda md: stub.GetRun(runtime_service_pb2.GetRunRequest(run_id=run_id), metadata=md),
        "ListRuns": lambda md: stub.ListRuns(runtime_service_pb2.ListRunsRequest(), metadata=md),
        "StreamRunEvents": lambda md: list(
            stub.StreamRunEvents(runtime_service_pb2.StreamRunEventsRequest(run_id=run_id), metadata=md)
        ),
        "CancelRun": lambda md: stub.CancelRun(
            runtime_service_pb2.CancelRunRequest(run_id=run_id), metadata=md
        ),
        "ResolveApproval": lambda md: stub.ResolveApproval(
            runtime_service_pb2.ResolveApprovalRequest(
                run_id=run_id, decision=run_pb2.APPROVAL_DECISION_APPROVE
            ),
            metadata=md,
        ),
        "ResolveOutcome": lambda md: stub.ResolveOutcome(
            runtime_service_pb2.ResolveOutcomeRequest(
                run_id=run_id, decision=runtime_service_pb2.OUTCOME_DECISION_FAILED
            ),
            metadata=md,
        ),
        "GetRunDiagnostics": lambda md: stub.GetRunDiagnostics(
            runtime_service_pb2.GetRunDiagnosticsRequest(run_id=run_id), metadata=md
        ),
    }


def test_anonymous_and_forged_credentials_are_refused_and_change_nothing(stack: SecureStack) -> None:
    run_id, before = paused_run(stack)
    with stack.channel() as channel:
        stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channel)
        calls = raw_calls(stub, run_id)
        forged: list[tuple[str, str]] = [
            ("authorization", "Bearer not-a-known-token"),
            ("x-agentrt-approver", "bob"),
        ]
        for metadata in ([], forged, [("authorization", "Basic YWxpY2U6")], [("x-agentrt-approver", "bob")]):
            for name, call in calls.items():
                with pytest.raises(grpc.RpcError) as info:
                    call(metadata)
                assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, (name, metadata)
                assert "not-a-known-token" not in (info.value.details() or "")
        # Health needs no credential (load balancers probe it); reflection does.
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
    with stack.client("alice") as alice:
        after = alice.get_run(run_id)
        assert after.revision == before.revision and after.phase == run_pb2.RUN_PHASE_WAITING_APPROVAL
        assert all(r.input != "x" for r in alice.list_runs(page_size=500).runs)  # no run was started
    assert "not-a-known-token" not in stack.runtime.stderr_text()


def test_plaintext_to_the_tls_port_fails(stack: SecureStack) -> None:
    with grpc.insecure_channel(stack.runtime.address) as channel:
        with pytest.raises(grpc.RpcError) as info:
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    with Client(stack.runtime.address, timeout=5) as plain:  # loopback, no CA: plaintext
        error = refused(lambda: plain.list_runs())
        assert error.code == grpc.StatusCode.UNAVAILABLE


def test_another_tenants_runs_answer_not_found_like_missing_ones(stack: SecureStack) -> None:
    run_id, before = paused_run(stack, "alice")
    pending = before.pending_approval
    with stack.client("carol") as carol:  # globex: every role, but not acme's runs
        for call in (
            lambda: carol.get_run(run_id),
            lambda: list(carol.stream_events(run_id, follow=True, timeout=10)),
            lambda: carol.cancel_run(run_id, reason="not yours"),
            lambda: carol.resolve_approval(
                run_id,
                pending.approval_id,
                approve=True,
                args_hash=pending.args_hash,
                expected_revision=before.revision,
            ),
            lambda: carol.resolve_outcome(run_id, "call_2_0", decision="failed", expected_revision=1),
            lambda: carol.get_run_diagnostics(run_id),  # an operator, of another tenant
        ):
            theirs = refused(call)
            missing = refused(lambda: carol.get_run("0" * 32))
            assert theirs.code == missing.code == grpc.StatusCode.NOT_FOUND
            assert theirs.reason == missing.reason == "RUN_NOT_FOUND"
        assert run_id not in {r.run_id for r in carol.list_runs(page_size=500).runs}
    with stack.client("alice") as alice:
        after = alice.get_run(run_id)
        assert after.revision == before.revision and after.phase == run_pb2.RUN_PHASE_WAITING_APPROVAL
        assert run_id in {r.run_id for r in alice.list_runs(page_size=500).runs}
        # Request keys are per tenant: the same key in another tenant starts that tenant's own run.
        mine = alice.start_run("small-refund", "refund A100", request_key="shared-key")
        list(alice.stream_events(mine.run_id, follow=True, timeout=60))  # leave no run behind
    with stack.client("carol") as carol:
        theirs = carol.start_run("small-refund", "refund A100", request_key="shared-key")
        assert theirs.run_id != mine.run_id and theirs.tenant_id == "globex"
        list(carol.stream_events(theirs.run_id, follow=True, timeout=60))


def test_only_operators_see_a_runs_diagnostics(stack: SecureStack) -> None:
    run_id, before = paused_run(stack, "alice")
    for who in ("alice", "bob", "erin"):  # runner, approver, both
        with stack.client(who) as client:
            error = refused(lambda: client.get_run_diagnostics(run_id))
            assert (error.code, error.reason) == (grpc.StatusCode.PERMISSION_DENIED, "MISSING_ROLE")
    with stack.client("ops") as ops:
        found = ops.get_run_diagnostics(run_id)
    assert found.run_id == run_id and found.revision == before.revision
    assert found.waiting.reason == run_pb2.WAIT_REASON_APPROVAL
    assert [c.tool for c in found.pending_calls] == ["refund.issue"]
    assert not any(token in stack.runtime.stderr_text() for token in stack.tokens.values())


def test_only_approvers_approve_and_the_approver_is_the_principal(stack: SecureStack) -> None:
    refunds_before = stack.refunds()
    run_id, run = paused_run(stack, "alice")
    pending = run.pending_approval

    def approve(client: Client) -> run_pb2.Run:
        return client.resolve_approval(
            run_id,
            pending.approval_id,
            approve=True,
            args_hash=pending.args_hash,
            expected_revision=run.revision,
        )

    for who in ("alice", "ops"):  # a runner, an operator
        with stack.client(who, metadata=[("x-agentrt-approver", "bob")]) as client:
            error = refused(lambda c=client: approve(c))
            assert error.code == grpc.StatusCode.PERMISSION_DENIED and error.reason == "MISSING_ROLE"
    with stack.client("alice") as alice:
        error = refused(
            lambda: alice.resolve_outcome(run_id, "call_2_0", decision="failed", expected_revision=1)
        )
        assert error.code == grpc.StatusCode.PERMISSION_DENIED
        assert alice.get_run(run_id).revision == run.revision
    assert stack.refunds() == refunds_before
    with stack.client("bob", metadata=[("x-agentrt-approver", "mallory")]) as bob:
        approve(bob)
        events = [e for e in bob.stream_events(run_id, follow=True, timeout=60) if e.seq]
    resolved = next(e.approval_resolved for e in events if e.HasField("approval_resolved"))
    assert resolved.approver == "bob"
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
    assert events[0].run_started.started_by == "alice"
    assert stack.refunds() == refunds_before + 1


def test_cancel_records_who_asked(stack: SecureStack) -> None:
    run_id, _ = paused_run(stack, "alice")
    with stack.client("ops") as ops:  # an operator may cancel any run of its tenant
        ops.cancel_run(run_id, reason="stop it")
        events = [e for e in ops.stream_events(run_id, follow=True, timeout=60) if e.seq]
    cancel = next(e.cancel_requested for e in events if e.HasField("cancel_requested"))
    assert cancel.requested_by == "ops" and cancel.reason == "stop it"
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_CANCELLED


def test_with_the_policies_off_a_runner_cancels_any_run_and_approves_its_own(stack: SecureStack) -> None:
    """Neither ``own_runs_only`` nor four eyes is on by default: what any runner (or runner and
    approver) of the tenant could do before, it still can (test_signal_policies turns them on)."""
    run_id, _ = paused_run(stack, "alice")
    with stack.client("dave") as dave:
        dave.cancel_run(run_id, reason="any runner may")
        events = [e for e in dave.stream_events(run_id, follow=True, timeout=60) if e.seq]
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_CANCELLED
    own_id, own = paused_run(stack, "erin")
    with stack.client("erin") as erin:
        pending = own.pending_approval
        erin.resolve_approval(
            own_id,
            pending.approval_id,
            approve=True,
            args_hash=pending.args_hash,
            expected_revision=own.revision,
        )
        events = [e for e in erin.stream_events(own_id, follow=True, timeout=60) if e.seq]
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED


INLINE_STEPS = {"steps": [{"text": "hello from an inline agent"}]}


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        (
            {"profile": "scripted", "options": {**INLINE_STEPS, "base_url": "http://127.0.0.1:9/v1"}},
            "OPTION_NOT_ALLOWED",
        ),
        (
            {"profile": "scripted", "options": {**INLINE_STEPS, "api_key_file": "/etc/shadow"}},
            "OPTION_NOT_ALLOWED",
        ),
        ({"profile": "scripted", "options": {**INLINE_STEPS, "api_key_env": "HOME"}}, "OPTION_NOT_ALLOWED"),
        ({"provider": "openai", "name": "gpt-4o", "options": {"base_url": "http://127.0.0.1:9/v1"}}, None),
    ],
)
def test_inline_agents_cannot_name_endpoints_or_key_sources(
    stack: SecureStack, model: dict[str, Any], reason: str | None
) -> None:
    from google.protobuf import json_format

    spec = json_format.ParseDict(
        {"name": "sneaky", "model": model, "tools": ["noop.echo"]}, run_pb2.AgentSpec()
    )
    with stack.client("alice") as alice:
        before = len(alice.list_runs(page_size=500).runs)
        error = refused(lambda: alice.start_run(input="hi", agent=spec))
        assert error.code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED)
        if reason is not None:
            assert error.reason == reason
        for secret in ("/etc/shadow", "127.0.0.1:9", "HOME"):
            assert secret not in error.message
        assert len(alice.list_runs(page_size=500).runs) == before


def test_inline_agents_need_a_role_and_the_tool_allow_list(stack: SecureStack) -> None:
    from google.protobuf import json_format

    ok = json_format.ParseDict(
        {"name": "inline", "model": {"profile": "scripted", "options": INLINE_STEPS}, "tools": ["noop.echo"]},
        run_pb2.AgentSpec(),
    )
    with stack.client("bob") as bob:  # an approver: not among inline_agents.roles
        error = refused(lambda: bob.start_run(input="hi", agent=ok))
        assert error.code == grpc.StatusCode.PERMISSION_DENIED
    refund = run_pb2.AgentSpec()
    refund.CopyFrom(ok)
    refund.tools.append("refund.issue")
    with stack.client("alice") as alice:
        error = refused(lambda: alice.start_run(input="hi", agent=refund))
        assert error.code == grpc.StatusCode.PERMISSION_DENIED and error.reason == "TOOL_NOT_ALLOWED"
        events = list(alice.run_agent(input="hi", agent=ok, timeout=60))
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED


def test_a_model_calling_a_tool_outside_its_agents_list_never_runs_it(stack: SecureStack) -> None:
    refunds_before = stack.refunds()
    with stack.client("alice") as alice:
        events = [e for e in alice.run_agent("echo-only", "please refund", timeout=60) if e.seq]
    failed = [e.tool_failed for e in events if e.HasField("tool_failed")]
    assert [f.tool for f in failed] == ["refund.issue"]
    assert failed[0].error.code == tool_pb2.TOOL_ERROR_CODE_NOT_ALLOWED
    assert not any(e.HasField("tool_started") and e.tool_started.tool == "refund.issue" for e in events)
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
    assert stack.refunds() == refunds_before  # the refund plugin's own store saw nothing


def grpcurl(stack: SecureStack, token: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    auth = ["-H", f"authorization: Bearer {token}"] if token else []
    return subprocess.run(
        [GRPCURL, "-cacert", str(stack.api_pki.ca_file), *auth, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_grpcurl_with_tls_and_a_bearer_token(stack: SecureStack) -> None:
    anonymous = grpcurl(stack, None, stack.runtime.address, "list")
    assert anonymous.returncode != 0 and "Unauthenticated" in anonymous.stderr
    listed = grpcurl(stack, stack.tokens["alice"], stack.runtime.address, "list")
    assert listed.returncode == 0, listed.stderr
    assert SERVICE in listed.stdout.split()
    started = grpcurl(
        stack,
        stack.tokens["alice"],
        "-d",
        json.dumps({"agent_name": "small-refund", "input": "refund A100"}),
        stack.runtime.address,
        f"{SERVICE}/RunAgent",
    )
    assert started.returncode == 0, started.stderr
    assert "RUN_PHASE_COMPLETED" in started.stdout
    assert stack.tokens["alice"] not in stack.runtime.stderr_text()
