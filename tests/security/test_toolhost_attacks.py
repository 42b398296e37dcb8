"""Attacks on a tool host that obeys only the runtime: even a caller holding a client certificate
of its CA cannot run, read or wedge anything without a grant the runtime signed for that very call."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentrt.client import event_type
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.proto.toolhost.v1 import tool_host_service_pb2 as svc
from agentrt.proto.toolhost.v1 import tool_host_service_pb2_grpc as svc_grpc
from agentrt.toolhost.security import GRANT_HEADER, GrantSigner
from tests.security.conftest import SecureStack

ARGS = json.dumps({"order_id": "A100", "amount": 5.0, "reason": "attack"})


def call_metadata(
    key: str, *, run_id: str = "run-x", fencing: int = 1, grant: str | None = None
) -> list[Any]:
    metadata = [
        ("x-agentrt-idempotency-key", key),
        ("x-agentrt-run-id", run_id),
        ("x-agentrt-call-id", "call_1_0"),
        ("x-agentrt-attempt", "1"),
        ("x-agentrt-fencing-token", str(fencing)),
    ]
    if grant is not None:
        metadata.append((GRANT_HEADER, grant))
    return metadata


def grant(signer: GrantSigner, key: str, *, arguments_json: str = ARGS, **overrides: Any) -> str:
    fields: dict[str, Any] = {
        "tenant": "acme",
        "run_id": "run-x",
        "call_id": "call_1_0",
        "idempotency_key": key,
        "fencing_token": 1,
        "tool": "refund.issue",
        "arguments_json": arguments_json,
    }
    fields.update(overrides)
    return signer.sign(**fields)


def ledger_rows(stack: SecureStack) -> int:
    import sqlite3

    path = stack.host.data_dir / "ledger.sqlite"
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT COUNT(*) FROM operations").fetchone()[0])


def attacks(stack: SecureStack) -> dict[str, tuple[list[Any], grpc.StatusCode]]:
    runtime_key = GrantSigner(key_file=stack.grant_key)
    stale = GrantSigner(key_file=stack.grant_key, clock=lambda: time.time() - 3600)
    stranger = GrantSigner(key=Ed25519PrivateKey.generate())
    key = f"attack-{uuid.uuid4().hex}"
    return {
        "no grant": (call_metadata(key), grpc.StatusCode.UNAUTHENTICATED),
        "garbage grant": (call_metadata(key, grant="e30.e30.e30"), grpc.StatusCode.UNAUTHENTICATED),
        "expired grant": (call_metadata(key, grant=grant(stale, key)), grpc.StatusCode.UNAUTHENTICATED),
        "grant signed by another key": (
            call_metadata(key, grant=grant(stranger, key, fencing_token=2**62)),
            grpc.StatusCode.UNAUTHENTICATED,
        ),
        "grant for other arguments": (
            call_metadata(key, grant=grant(runtime_key, key, arguments_json='{"order_id": "A100"}')),
            grpc.StatusCode.PERMISSION_DENIED,
        ),
        "grant for another key": (
            call_metadata(key, grant=grant(runtime_key, "other-key")),
            grpc.StatusCode.PERMISSION_DENIED,
        ),
        "forged fencing token": (
            call_metadata(key, fencing=10**18, grant=grant(runtime_key, key)),
            grpc.StatusCode.PERMISSION_DENIED,
        ),
        "oversized fencing token": (
            call_metadata(key, fencing=10**30, grant=grant(runtime_key, key)),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
    }


def test_direct_invoke_and_get_operation_without_a_valid_grant_run_and_read_nothing(
    stack: SecureStack,
) -> None:
    refunds_before, rows_before = stack.refunds(), ledger_rows(stack)
    with stack.host_channel() as channel:
        stub = svc_grpc.ToolHostServiceStub(channel)
        assert "refund.issue" in {t.name for t in stub.ListTools(svc.ListToolsRequest(), timeout=10).tools}
        for name, (metadata, code) in attacks(stack).items():
            with pytest.raises(grpc.RpcError) as info:
                stub.InvokeTool(
                    svc.InvokeToolRequest(tool="refund.issue", arguments_json=ARGS),
                    metadata=metadata,
                    timeout=10,
                )
            assert info.value.code() == code, name
            key = dict(metadata)["x-agentrt-idempotency-key"]
            with pytest.raises(grpc.RpcError) as info:
                stub.GetOperation(svc.GetOperationRequest(idempotency_key=key), metadata=metadata, timeout=10)
            assert info.value.code() in (code, grpc.StatusCode.NOT_FOUND), name
    assert stack.refunds() == refunds_before
    assert ledger_rows(stack) == rows_before


def test_without_a_client_certificate_the_host_is_unreachable(stack: SecureStack) -> None:
    with stack.host_channel(client_cert=False) as channel:
        with pytest.raises(grpc.RpcError) as info:
            svc_grpc.ToolHostServiceStub(channel).ListTools(svc.ListToolsRequest(), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    with grpc.insecure_channel(stack.host.address) as channel:
        with pytest.raises(grpc.RpcError) as info:
            svc_grpc.ToolHostServiceStub(channel).ListTools(svc.ListToolsRequest(), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_another_tenants_operation_cannot_be_read_and_keys_do_not_collide(stack: SecureStack) -> None:
    signer = GrantSigner(key_file=stack.grant_key)
    key = f"shared-{uuid.uuid4().hex}"
    echo = json.dumps({"text": "acme's secret"})
    with stack.host_channel() as channel:
        stub = svc_grpc.ToolHostServiceStub(channel)
        acme = grant(signer, key, tool="noop.echo", arguments_json=echo)
        done = stub.InvokeTool(
            svc.InvokeToolRequest(tool="noop.echo", arguments_json=echo),
            metadata=call_metadata(key, grant=acme),
        )
        assert "acme's secret" in done.result_json
        globex = grant(signer, key, tool="noop.echo", arguments_json=echo, tenant="globex")
        with pytest.raises(grpc.RpcError) as info:
            stub.GetOperation(
                svc.GetOperationRequest(idempotency_key=key), metadata=call_metadata(key, grant=globex)
            )
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        other = json.dumps({"text": "globex's own"})
        theirs = stub.InvokeTool(
            svc.InvokeToolRequest(tool="noop.echo", arguments_json=other),
            metadata=call_metadata(
                key, grant=grant(signer, key, tool="noop.echo", arguments_json=other, tenant="globex")
            ),
        )
        assert "globex's own" in theirs.result_json and not theirs.replayed  # no key conflict either


def test_a_wedging_attempt_does_not_stall_another_run(stack: SecureStack) -> None:
    with stack.client("alice") as alice:
        run_id = alice.start_run("refunder", "refund A100 please").run_id
        # An attacker with a host certificate tries to fence the victim's run out with a huge token.
        stranger = GrantSigner(key=Ed25519PrivateKey.generate())
        with stack.host_channel() as channel:
            stub = svc_grpc.ToolHostServiceStub(channel)
            for signer in (stranger, GrantSigner(key_file=stack.grant_key)):
                key = f"wedge-{uuid.uuid4().hex}"
                forged = grant(signer, key, run_id=run_id, fencing_token=2**62)
                with pytest.raises(grpc.RpcError):
                    stub.InvokeTool(
                        svc.InvokeToolRequest(tool="refund.issue", arguments_json=ARGS),
                        metadata=call_metadata(key, run_id=run_id, fencing=1, grant=forged),
                        timeout=10,
                    )
        # The victim's run goes on to its approval pause, unwedged (follow streams do not stop there).
        with alice.stream_events(run_id, follow=True, timeout=60) as stream:
            assert any(event_type(e) == "approval.requested" for e in stream)
        run = alice.get_run(run_id)
        assert run.phase == run_pb2.RUN_PHASE_WAITING_APPROVAL
    with stack.client("bob") as bob:
        pending = run.pending_approval
        bob.resolve_approval(
            run_id,
            pending.approval_id,
            approve=True,
            args_hash=pending.args_hash,
            expected_revision=run.revision,
        )
        events = [e for e in bob.stream_events(run_id, follow=True, timeout=60) if e.seq]
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
