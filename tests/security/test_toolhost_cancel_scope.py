"""CancelOperation is scoped like GetOperation (R3.3): a real tool host over mTLS with call grants.

A grant lets its holder stop one operation: the one of its tenant, its run and its idempotency
key. Another tenant's operation, or another run's, is answered exactly like a key the host never
saw (NOT_FOUND, nothing leaks), and keeps running to its recorded end. A cancel without a grant
the runtime signed for that key is refused before the ledger is read.

The victim is ``slow.write`` (agentrt.plugins.fault_tools): an async write that stops at once,
with no effect, when its cancellation signal is set; so any cancel that got through shows as a
CANCELLED ledger entry and a missing effect.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from agentrt.plugins.fault_tools import count_slow_writes
from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.proto.toolhost.v1.tool_host_service_pb2 import (
    CancelOperationRequest,
    GetOperationRequest,
    InvokeToolRequest,
    InvokeToolResponse,
)
from agentrt.proto.toolhost.v1.tool_host_service_pb2_grpc import ToolHostServiceStub
from agentrt.testing import ToolHostProcess, spawn_tool_host
from agentrt.toolhost.security import (
    GRANT_HEADER,
    DevPki,
    GrantSigner,
    channel_credentials,
    generate_dev_pki,
    public_key_pem,
    write_signing_key,
)

PLUGINS = ("agentrt.plugins.demo_tools", "agentrt.plugins.fault_tools")
RUNTIME_CLIENT = "agentrt-runtime"
WRITE_SECONDS = 1.5  # long enough to be cancelled mid-way; the write's own timeout is 10 s


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> DevPki:
    return generate_dev_pki(tmp_path_factory.mktemp("pki"), clients=[RUNTIME_CLIENT])


@pytest.fixture(scope="module")
def grant_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    directory = tmp_path_factory.mktemp("grants")
    key_file, pub_file = directory / "grant.key", directory / "grant-keys.pem"
    pub_file.write_bytes(public_key_pem(write_signing_key(key_file)))
    return key_file, pub_file


@pytest.fixture(scope="module")
def signer(grant_key: tuple[Path, Path]) -> GrantSigner:
    return GrantSigner(key_file=grant_key[0], ttl_s=30)


@pytest.fixture(scope="module")
def host(
    tmp_path_factory: pytest.TempPathFactory, pki: DevPki, grant_key: tuple[Path, Path]
) -> Iterator[ToolHostProcess]:
    with spawn_tool_host(
        tmp_path_factory.mktemp("toolhost"),
        plugins=PLUGINS,
        tls_cert=pki.server_cert_file,
        tls_key=pki.server_key_file,
        client_ca=pki.ca_file,
        grant_keys=grant_key[1],
    ) as host:
        yield host


@pytest.fixture
async def stub(host: ToolHostProcess, pki: DevPki) -> AsyncIterator[ToolHostServiceStub]:
    cert, key = pki.client_files[RUNTIME_CLIENT]
    creds = channel_credentials(ca_file=str(pki.ca_file), cert_file=str(cert), key_file=str(key))
    async with grpc.aio.secure_channel(host.address, creds) as channel:
        yield ToolHostServiceStub(channel)


class Write:
    """One slow.write call as the runtime would send it, and grants for it."""

    def __init__(self, *, tenant: str = "acme", run_id: str = "", key: str = "", call_id: str = "call_1_0"):
        self.tenant = tenant
        self.run_id = run_id or f"run-{uuid.uuid4().hex}"
        self.key = key or f"key-{uuid.uuid4().hex}"
        self.call_id = call_id
        self.arguments_json = json.dumps({"seconds": WRITE_SECONDS, "note": f"{self.tenant} {self.key}"})

    def grant(self, signer: GrantSigner, **overrides: Any) -> str:
        fields: dict[str, Any] = {
            "tenant": self.tenant,
            "run_id": self.run_id,
            "call_id": self.call_id,
            "idempotency_key": self.key,
            "fencing_token": 1,
            "tool": "slow.write",
            "arguments_json": self.arguments_json,
        }
        fields.update(overrides)
        return signer.sign(**fields)

    def metadata(self, grant: str | None) -> list[tuple[str, str]]:
        pairs = [
            ("x-agentrt-idempotency-key", self.key),
            ("x-agentrt-run-id", self.run_id),
            ("x-agentrt-call-id", self.call_id),
            ("x-agentrt-attempt", "1"),
            ("x-agentrt-fencing-token", "1"),
        ]
        return pairs + ([(GRANT_HEADER, grant)] if grant is not None else [])

    def invoke(self, stub: ToolHostServiceStub, signer: GrantSigner) -> Any:
        request = InvokeToolRequest(tool="slow.write", arguments_json=self.arguments_json)
        return stub.InvokeTool(request, metadata=self.metadata(self.grant(signer)), timeout=20)


def cancel(stub: ToolHostServiceStub, key: str, grant: str | None) -> Any:
    """A CancelOperation of ``key``, carrying ``grant`` (and the headers a runtime would send)."""
    metadata = [("x-agentrt-idempotency-key", key)] + ([(GRANT_HEADER, grant)] if grant is not None else [])
    return stub.CancelOperation(
        CancelOperationRequest(idempotency_key=key, reason="run cancelled"), metadata=metadata, timeout=10
    )


async def refused(call: Any) -> tuple[grpc.StatusCode, str, str, dict[str, str]]:
    """(code, ErrorInfo reason, message, ErrorInfo metadata) of a refused RPC."""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    status: status_pb2.Status | None = await rpc_status.aio.from_call(call)
    assert status is not None, "no google.rpc.Status details"
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            error_info = error_details_pb2.ErrorInfo()
            detail.Unpack(error_info)
            return info.value.code(), error_info.reason, info.value.details() or "", dict(error_info.metadata)
    raise AssertionError("no ErrorInfo")


def ledger(data_dir: Path, key: str) -> list[tuple[str, str, str]]:
    """(tenant, run_id, status) of every ledger entry of ``key``, whatever its tenant."""
    db = sqlite3.connect(f"file:{data_dir / 'ledger.sqlite'}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT tenant, run_id, status FROM operations WHERE idempotency_key = ? ORDER BY tenant", (key,)
        ).fetchall()
        return [(str(t), str(r), str(s)) for t, r, s in rows]
    finally:
        db.close()


async def running(host: ToolHostProcess, write: Write, call: asyncio.Future[Any]) -> None:
    """Wait until the write's ledger entry says RUNNING (the tool has started)."""
    deadline = time.monotonic() + 10
    while ledger(host.data_dir, write.key) != [(write.tenant, write.run_id, "RUNNING")]:
        assert not call.done(), "the write ended before it could be cancelled"
        assert time.monotonic() < deadline, "the write did not start"
        await asyncio.sleep(0.02)


async def assert_completes(host: ToolHostProcess, write: Write, call: asyncio.Future[Any]) -> None:
    """The write ran to its end: its answer, its one effect and its SUCCEEDED ledger entry."""
    response: InvokeToolResponse = await call
    assert not response.HasField("error"), response.error
    assert json.loads(response.result_json) == {"written": f"{write.tenant} {write.key}", "key": write.key}
    assert count_slow_writes(host.data_dir, write.key) == 1
    assert ledger(host.data_dir, write.key) == [(write.tenant, write.run_id, "SUCCEEDED")]


async def unknown_key_answer(stub: ToolHostServiceStub, write: Write, signer: GrantSigner) -> Any:
    """What the same caller hears for a key the host never saw (the NOT_FOUND to match)."""
    missing = f"missing-{uuid.uuid4().hex}"
    grant = write.grant(signer, idempotency_key=missing)
    code, reason, message, metadata = await refused(cancel(stub, missing, grant))
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "OPERATION_NOT_FOUND")
    assert metadata == {"idempotency_key": missing}
    return code, reason, message


# --- the owner can cancel (so the refusals below are not vacuous) ---------------------------------


async def test_the_owners_own_grant_cancels_its_running_write(
    stub: ToolHostServiceStub, host: ToolHostProcess, signer: GrantSigner
) -> None:
    write = Write()
    call = asyncio.ensure_future(write.invoke(stub, signer))
    await running(host, write, call)
    asked = await cancel(stub, write.key, write.grant(signer))
    assert asked.signalled
    response = await call
    assert response.error.code == tool_pb2.TOOL_ERROR_CODE_CANCELLED
    assert count_slow_writes(host.data_dir, write.key) == 0
    assert ledger(host.data_dir, write.key) == [(write.tenant, write.run_id, "FAILED")]


# --- another tenant -------------------------------------------------------------------------------


async def test_another_tenant_cannot_cancel_a_running_write_and_hears_not_found(
    stub: ToolHostServiceStub, host: ToolHostProcess, signer: GrantSigner
) -> None:
    victim = Write(tenant="acme")
    # The attacker's grant is genuine (signed by the runtime's key) and names every binding of the
    # victim's call, the key included; only its tenant is its own.
    attacker = Write(tenant="globex", run_id=victim.run_id, key=victim.key)
    call = asyncio.ensure_future(victim.invoke(stub, signer))
    await running(host, victim, call)

    expected = await unknown_key_answer(stub, attacker, signer)
    code, reason, message, metadata = await refused(cancel(stub, victim.key, attacker.grant(signer)))
    # Exactly what a key that does not exist gets: nothing says the key is in use elsewhere.
    assert (code, reason, message) == expected
    assert metadata == {"idempotency_key": victim.key}
    code, reason, _, _ = await refused(
        stub.GetOperation(
            GetOperationRequest(idempotency_key=victim.key),
            metadata=[(GRANT_HEADER, attacker.grant(signer))],
            timeout=10,
        )
    )
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "OPERATION_NOT_FOUND")

    await assert_completes(host, victim, call)
    # The refused cancel left no entry of the attacker's tenant behind.
    assert [tenant for tenant, _, _ in ledger(host.data_dir, victim.key)] == ["acme"]
    # And once it ended, the victim's tenant still reads its own outcome.
    found = await stub.GetOperation(
        GetOperationRequest(idempotency_key=victim.key),
        metadata=[(GRANT_HEADER, victim.grant(signer))],
        timeout=10,
    )
    assert found.operation.status == tool_pb2.OPERATION_STATUS_SUCCEEDED


# --- another run of the same tenant ---------------------------------------------------------------


async def test_another_run_of_the_same_tenant_cannot_cancel_a_running_write(
    stub: ToolHostServiceStub, host: ToolHostProcess, signer: GrantSigner
) -> None:
    victim = Write(tenant="acme")
    other_run = Write(tenant="acme", call_id="call_2_0")  # its own run and key
    call = asyncio.ensure_future(victim.invoke(stub, signer))
    await running(host, victim, call)

    # The other run's genuine grant is for its own key: it does not cover the victim's.
    code, reason, _, metadata = await refused(cancel(stub, victim.key, other_run.grant(signer)))
    assert (code, reason, metadata["fields"]) == (
        grpc.StatusCode.PERMISSION_DENIED,
        "GRANT_MISMATCH",
        "idempotency_key",
    )
    # A grant naming the victim's key but the other run (and its call) is not the victim's call
    # either: the grant binds the run, and the ledger knows which run started the operation.
    # It is answered like a key that does not exist.
    crossed = other_run.grant(signer, idempotency_key=victim.key)
    expected = await unknown_key_answer(stub, other_run, signer)
    code, reason, message, metadata = await refused(cancel(stub, victim.key, crossed))
    assert (code, reason, message) == expected
    assert metadata == {"idempotency_key": victim.key}
    # Nor can it read the victim's operation: the same answer as for a missing key.
    read = stub.GetOperation(
        GetOperationRequest(idempotency_key=victim.key), metadata=[(GRANT_HEADER, crossed)]
    )
    code, reason, message, metadata = await refused(read)
    assert (code, reason, message) == expected

    await assert_completes(host, victim, call)
    # The victim's own grant still reads it.
    found = await stub.GetOperation(
        GetOperationRequest(idempotency_key=victim.key),
        metadata=[(GRANT_HEADER, victim.grant(signer))],
        timeout=10,
    )
    assert found.operation.status == tool_pb2.OPERATION_STATUS_SUCCEEDED


# --- a stale owner of the same run ----------------------------------------------------------------


async def test_a_stale_owner_cannot_cancel_the_new_owners_write(
    stub: ToolHostServiceStub, host: ToolHostProcess, signer: GrantSigner
) -> None:
    victim = Write(tenant="acme")
    call = asyncio.ensure_future(victim.invoke(stub, signer))  # the owner with fencing token 1
    await running(host, victim, call)
    # Another replica takes the run over (token 2); its first call to this host says so.
    newer = Write(tenant="acme", run_id=victim.run_id, call_id="call_2_0")
    request = InvokeToolRequest(tool="noop.echo", arguments_json="{}")
    pairs = [(k, "2" if k == "x-agentrt-fencing-token" else v) for k, v in newer.metadata(None)]
    grant = newer.grant(signer, tool="noop.echo", arguments_json="{}", fencing_token=2)
    await stub.InvokeTool(request, metadata=[*pairs, (GRANT_HEADER, grant)], timeout=10)

    # The old owner (token 1), paused meanwhile, wakes and asks to stop the write: refused.
    code, reason, _, metadata = await refused(cancel(stub, victim.key, victim.grant(signer)))
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "FENCED")
    assert metadata == {"fencing_token": "1", "current": "2"}
    await assert_completes(host, victim, call)


# --- no grant, or not one the runtime signed for this key -----------------------------------------


def _forged(genuine: str, **claims: Any) -> str:
    """``genuine`` with some claims rewritten, keeping its header and signature."""
    header, body, signature = genuine.split(".")
    decoded = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    decoded.update(claims)
    rewritten = base64.urlsafe_b64encode(json.dumps(decoded, separators=(",", ":")).encode()).rstrip(b"=")
    return f"{header}.{rewritten.decode()}.{signature}"


async def test_a_cancel_without_a_valid_grant_is_refused_and_the_write_completes(
    stub: ToolHostServiceStub, host: ToolHostProcess, signer: GrantSigner, grant_key: tuple[Path, Path]
) -> None:
    victim = Write(tenant="acme")
    call = asyncio.ensure_future(victim.invoke(stub, signer))
    await running(host, victim, call)

    stranger = GrantSigner(key=Ed25519PrivateKey.generate())
    expired = GrantSigner(key_file=grant_key[0], ttl_s=30, clock=lambda: time.time() - 3600)
    globex = Write(tenant="globex", run_id=victim.run_id, key=victim.key).grant(signer)
    attempts: dict[str, tuple[str | None, grpc.StatusCode, str]] = {
        "no grant": (None, grpc.StatusCode.UNAUTHENTICATED, "GRANT_REQUIRED"),
        "empty grant": ("", grpc.StatusCode.UNAUTHENTICATED, "GRANT_REQUIRED"),
        "garbage": ("e30.e30.e30", grpc.StatusCode.UNAUTHENTICATED, "GRANT_UNKNOWN_KEY"),
        "not a JWT": ("not-a-grant", grpc.StatusCode.UNAUTHENTICATED, "GRANT_INVALID"),
        "signed by an untrusted key": (
            victim.grant(stranger),
            grpc.StatusCode.UNAUTHENTICATED,
            "GRANT_UNKNOWN_KEY",
        ),
        "expired": (victim.grant(expired), grpc.StatusCode.UNAUTHENTICATED, "GRANT_EXPIRED"),
        # Another tenant's genuine grant with its tenant claim rewritten: the signature fails.
        "tenant claim forged": (
            _forged(globex, ten="acme"),
            grpc.StatusCode.UNAUTHENTICATED,
            "GRANT_INVALID",
        ),
        "genuine grant for another key": (
            victim.grant(signer, idempotency_key=f"other-{uuid.uuid4().hex}"),
            grpc.StatusCode.PERMISSION_DENIED,
            "GRANT_MISMATCH",
        ),
    }
    for name, (grant, code, reason) in attempts.items():
        got_code, got_reason, _, _ = await refused(cancel(stub, victim.key, grant))
        assert (got_code, got_reason) == (code, reason), name
    assert ledger(host.data_dir, victim.key) == [("acme", victim.run_id, "RUNNING")]

    await assert_completes(host, victim, call)
