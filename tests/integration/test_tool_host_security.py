"""The tool host obeys only the runtime (R3.3, R10.2): real host processes over mTLS with call grants.

Every refused call is checked three ways: the gRPC status and ErrorInfo reason, no ledger row
for its key, and zero refunds in the refund plugin's own store.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import subprocess
import sys
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

from agentrt.plugins.demo_tools import SLEEP_LOG_FILE, count_refunds
from agentrt.proto.toolhost.v1.tool_host_service_pb2 import (
    GetOperationRequest,
    InvokeToolRequest,
    InvokeToolResponse,
    ListToolsRequest,
    PreviewToolRequest,
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
    write_key_file,
    write_signing_key,
)

PLUGINS = ("agentrt.plugins.demo_tools",)
REFUND = {"order_id": "A100", "amount": 2.5, "reason": "damaged box"}
RUNTIME_CLIENT = "agentrt-runtime"


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


def _secure_host(
    data_dir: Path, pki: DevPki, grant_keys: Path, **options: Any
) -> contextlib.AbstractContextManager[ToolHostProcess]:
    return spawn_tool_host(
        data_dir,
        plugins=PLUGINS,
        tls_cert=pki.server_cert_file,
        tls_key=pki.server_key_file,
        client_ca=pki.ca_file,
        grant_keys=grant_keys,
        **options,
    )


@pytest.fixture(scope="module")
def host(
    tmp_path_factory: pytest.TempPathFactory, pki: DevPki, grant_key: tuple[Path, Path]
) -> Iterator[ToolHostProcess]:
    with _secure_host(tmp_path_factory.mktemp("toolhost"), pki, grant_key[1]) as host:
        yield host


def _client_credentials(pki: DevPki) -> grpc.ChannelCredentials:
    cert, key = pki.client_files[RUNTIME_CLIENT]
    return channel_credentials(ca_file=str(pki.ca_file), cert_file=str(cert), key_file=str(key))


@pytest.fixture
async def stub(host: ToolHostProcess, pki: DevPki) -> AsyncIterator[ToolHostServiceStub]:
    async with grpc.aio.secure_channel(host.address, _client_credentials(pki)) as channel:
        yield ToolHostServiceStub(channel)


class Call:
    """One InvokeTool call as the runtime would send it, and the grant for it."""

    def __init__(
        self,
        tool: str,
        args: dict[str, Any],
        *,
        tenant: str = "acme",
        key: str | None = None,
        run_id: str = "run-1",
        call_id: str = "call_1_0",
        fencing_token: int = 3,
    ) -> None:
        self.tool = tool
        self.arguments_json = json.dumps(args)
        self.tenant = tenant
        self.key = key or f"key-{uuid.uuid4().hex}"
        self.run_id = run_id
        self.call_id = call_id
        self.fencing_token = fencing_token

    def grant(self, signer: GrantSigner, **overrides: Any) -> str:
        fields: dict[str, Any] = {
            "tenant": self.tenant,
            "run_id": self.run_id,
            "call_id": self.call_id,
            "idempotency_key": self.key,
            "fencing_token": self.fencing_token,
            "tool": self.tool,
            "arguments_json": self.arguments_json,
        }
        fields.update(overrides)
        return signer.sign(**fields)

    def metadata(self, grant: str | None, *, fencing_token: str | None = None) -> list[tuple[str, str]]:
        pairs = [
            ("x-agentrt-idempotency-key", self.key),
            ("x-agentrt-run-id", self.run_id),
            ("x-agentrt-call-id", self.call_id),
            ("x-agentrt-attempt", "1"),
            ("x-agentrt-fencing-token", fencing_token or str(self.fencing_token)),
        ]
        return pairs + ([(GRANT_HEADER, grant)] if grant is not None else [])

    def invoke(
        self, stub: ToolHostServiceStub, grant: str | None, *, fencing_token: str | None = None
    ) -> Any:
        request = InvokeToolRequest(tool=self.tool, arguments_json=self.arguments_json)
        return stub.InvokeTool(
            request, metadata=self.metadata(grant, fencing_token=fencing_token), timeout=10
        )

    def get_operation(self, stub: ToolHostServiceStub, grant: str | None) -> Any:
        metadata = [(GRANT_HEADER, grant)] if grant is not None else []
        return stub.GetOperation(GetOperationRequest(idempotency_key=self.key), metadata=metadata, timeout=10)


async def _refused(call: Any) -> tuple[grpc.StatusCode, str, dict[str, str]]:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    status: status_pb2.Status | None = await rpc_status.aio.from_call(call)
    assert status is not None, "no google.rpc.Status details"
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            error_info = error_details_pb2.ErrorInfo()
            detail.Unpack(error_info)
            return info.value.code(), error_info.reason, dict(error_info.metadata)
    raise AssertionError("no ErrorInfo")


def _ledger_rows(data_dir: Path, key: str) -> int:
    db = sqlite3.connect(f"file:{data_dir / 'ledger.sqlite'}?mode=ro", uri=True)
    try:
        (count,) = db.execute("SELECT COUNT(*) FROM operations WHERE idempotency_key = ?", (key,)).fetchone()
        return int(count)
    finally:
        db.close()


def _expired_signer(grant_key: tuple[Path, Path]) -> GrantSigner:
    # A grant issued an hour ago by the trusted key: well past its expiry and the host's leeway.
    return GrantSigner(key_file=grant_key[0], ttl_s=30, clock=lambda: time.time() - 3600)


# --- transport ---------------------------------------------------------------------------------


async def test_list_tools_with_the_runtime_client_certificate(stub: ToolHostServiceStub) -> None:
    tools = [t.name for t in (await stub.ListTools(ListToolsRequest(), timeout=10)).tools]
    assert "refund.issue" in tools


async def test_plaintext_to_the_tls_port_fails(host: ToolHostProcess) -> None:
    async with grpc.aio.insecure_channel(host.address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await ToolHostServiceStub(channel).ListTools(ListToolsRequest(), timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_tls_without_a_client_certificate_fails(host: ToolHostProcess, pki: DevPki) -> None:
    credentials = channel_credentials(ca_file=str(pki.ca_file))
    async with grpc.aio.secure_channel(host.address, credentials) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await ToolHostServiceStub(channel).ListTools(ListToolsRequest(), timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_client_certificate_from_another_ca_fails(
    host: ToolHostProcess, pki: DevPki, tmp_path: Path
) -> None:
    other = generate_dev_pki(tmp_path / "other", clients=["intruder"])
    cert, key = other.client_files["intruder"]
    credentials = channel_credentials(ca_file=str(pki.ca_file), cert_file=str(cert), key_file=str(key))
    async with grpc.aio.secure_channel(host.address, credentials) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await ToolHostServiceStub(channel).ListTools(ListToolsRequest(), timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


# --- InvokeTool --------------------------------------------------------------------------------


async def test_a_granted_refund_runs_once(
    stub: ToolHostServiceStub, host: ToolHostProcess, signer: GrantSigner
) -> None:
    before = count_refunds(host.data_dir)
    call = Call("refund.issue", REFUND)
    first = await call.invoke(stub, call.grant(signer))
    assert json.loads(first.result_json)["status"] == "issued"
    again = await call.invoke(stub, call.grant(signer))  # a retry with a fresh grant replays
    assert (again.replayed, again.result_json) == (True, first.result_json)
    assert count_refunds(host.data_dir) == before + 1


@pytest.mark.parametrize(
    ("case", "code", "reason"),
    [
        ("no grant", grpc.StatusCode.UNAUTHENTICATED, "GRANT_REQUIRED"),
        ("garbage", grpc.StatusCode.UNAUTHENTICATED, "GRANT_INVALID"),
        ("expired", grpc.StatusCode.UNAUTHENTICATED, "GRANT_EXPIRED"),
        ("lives 10^9 s", grpc.StatusCode.UNAUTHENTICATED, "GRANT_TOO_LONG"),
        ("unknown key", grpc.StatusCode.UNAUTHENTICATED, "GRANT_UNKNOWN_KEY"),
        ("other arguments", grpc.StatusCode.PERMISSION_DENIED, "GRANT_MISMATCH"),
        ("other tool", grpc.StatusCode.PERMISSION_DENIED, "GRANT_MISMATCH"),
        ("other key", grpc.StatusCode.PERMISSION_DENIED, "GRANT_MISMATCH"),
        ("other run", grpc.StatusCode.PERMISSION_DENIED, "GRANT_MISMATCH"),
        ("other call", grpc.StatusCode.PERMISSION_DENIED, "GRANT_MISMATCH"),
        ("forged fencing token", grpc.StatusCode.PERMISSION_DENIED, "GRANT_MISMATCH"),
        ("huge fencing token", grpc.StatusCode.INVALID_ARGUMENT, "INVALID_METADATA"),
    ],
)
async def test_a_refund_without_a_matching_grant_is_refused_and_runs_nothing(
    stub: ToolHostServiceStub,
    host: ToolHostProcess,
    signer: GrantSigner,
    grant_key: tuple[Path, Path],
    case: str,
    code: grpc.StatusCode,
    reason: str,
) -> None:
    before = count_refunds(host.data_dir)
    call = Call("refund.issue", REFUND)
    fencing_token = None
    grant: str | None
    if case == "no grant":
        grant = None
    elif case == "garbage":
        grant = "not-a-jwt"
    elif case == "expired":
        grant = call.grant(_expired_signer(grant_key))
    elif case == "lives 10^9 s":  # signed by the trusted key, past the host's default cap
        grant = call.grant(GrantSigner(key_file=grant_key[0], ttl_s=10**9))
    elif case == "unknown key":
        grant = call.grant(GrantSigner(key=Ed25519PrivateKey.generate()))
    elif case == "other arguments":
        grant = call.grant(signer, arguments_json=json.dumps({**REFUND, "amount": 0.5}))
    elif case == "other tool":
        grant = call.grant(signer, tool="orders.lookup")
    elif case == "other key":
        grant = call.grant(signer, idempotency_key="key-of-another-call")
    elif case == "other run":
        grant = call.grant(signer, run_id="run-2")
    elif case == "other call":
        grant = call.grant(signer, call_id="call_9_9")
    elif case == "forged fencing token":
        # A genuine grant for fencing token 3, sent with 9 in the header: it would fence the run.
        grant, fencing_token = call.grant(signer), "9"
    else:
        grant, fencing_token = call.grant(signer), str(2**64)
    got_code, got_reason, _ = await _refused(call.invoke(stub, grant, fencing_token=fencing_token))
    assert (got_code, got_reason) == (code, reason)
    assert _ledger_rows(host.data_dir, call.key) == 0
    assert count_refunds(host.data_dir) == before
    if grant:
        assert grant not in host.stderr_text()  # refusals are logged without the grant


async def test_a_mismatch_names_the_fields_that_differ(
    stub: ToolHostServiceStub, signer: GrantSigner
) -> None:
    call = Call("refund.issue", REFUND)
    grant = call.grant(signer, arguments_json="{}", fencing_token=4)
    _, reason, metadata = await _refused(call.invoke(stub, grant))
    assert (reason, metadata["fields"]) == ("GRANT_MISMATCH", "arguments_json,fencing_token")


async def test_a_forged_fencing_token_cannot_fence_the_real_run(
    stub: ToolHostServiceStub, host: ToolHostProcess, signer: GrantSigner
) -> None:
    run_id = f"run-{uuid.uuid4().hex}"
    forged = Call("orders.lookup", {"order_id": "A100"}, run_id=run_id, fencing_token=3)
    await _refused(forged.invoke(stub, forged.grant(signer), fencing_token=str(2**63 - 1)))
    real = Call("orders.lookup", {"order_id": "A100"}, run_id=run_id, fencing_token=3)
    response = await real.invoke(stub, real.grant(signer))
    assert json.loads(response.result_json)["order_id"] == "A100"


async def test_the_same_key_in_two_tenants_runs_twice_independently(
    stub: ToolHostServiceStub, host: ToolHostProcess, signer: GrantSigner
) -> None:
    key, run_id = f"shared-{uuid.uuid4().hex}", f"run-{uuid.uuid4().hex}"
    calls = [
        Call("sleep.wait", {"seconds": 0}, tenant=tenant, key=key, run_id=run_id, call_id=f"{tenant}-{key}")
        for tenant in ("acme", "globex")
    ]
    for call in calls:
        response = await call.invoke(stub, call.grant(signer))
        assert not response.replayed
    lines = (host.data_dir / SLEEP_LOG_FILE).read_text().splitlines()
    assert [line for line in lines if key in line] == [
        f"started acme-{key}",
        f"finished acme-{key}",
        f"started globex-{key}",
        f"finished globex-{key}",
    ]
    operations = [await call.get_operation(stub, call.grant(signer)) for call in calls]
    assert [op.operation.run_id for op in operations] == [run_id, run_id]
    assert _ledger_rows(host.data_dir, key) == 2


async def test_the_longest_grant_lifetime_is_configurable_and_a_refusal_writes_nothing(
    tmp_path: Path, pki: DevPki, grant_key: tuple[Path, Path]
) -> None:
    with _secure_host(
        tmp_path / "data", pki, grant_key[1], extra_args=["--grant-max-lifetime", "60"]
    ) as host:
        async with grpc.aio.secure_channel(host.address, _client_credentials(pki)) as channel:
            stub = ToolHostServiceStub(channel)
            call = Call("refund.issue", REFUND)
            too_long = call.grant(GrantSigner(key_file=grant_key[0], ttl_s=61))
            code, reason, _ = await _refused(call.invoke(stub, too_long))
            assert (code, reason) == (grpc.StatusCode.UNAUTHENTICATED, "GRANT_TOO_LONG")
            assert (_ledger_rows(host.data_dir, call.key), count_refunds(host.data_dir)) == (0, 0)
            code, reason, _ = await _refused(call.get_operation(stub, too_long))
            assert (code, reason) == (grpc.StatusCode.UNAUTHENTICATED, "GRANT_TOO_LONG")
            reply = await call.invoke(stub, call.grant(GrantSigner(key_file=grant_key[0], ttl_s=60)))
            assert json.loads(reply.result_json)["status"] == "issued"
            assert (_ledger_rows(host.data_dir, call.key), count_refunds(host.data_dir)) == (1, 1)


# --- GetOperation and PreviewTool -------------------------------------------------------------


async def test_get_operation_needs_a_grant_for_the_key_in_its_tenant(
    stub: ToolHostServiceStub, signer: GrantSigner, grant_key: tuple[Path, Path]
) -> None:
    call = Call("orders.lookup", {"order_id": "A101"})
    await call.invoke(stub, call.grant(signer))
    found = await call.get_operation(stub, call.grant(signer))
    assert json.loads(found.operation.result_json)["order_id"] == "A101"
    code, reason, _ = await _refused(call.get_operation(stub, None))
    assert (code, reason) == (grpc.StatusCode.UNAUTHENTICATED, "GRANT_REQUIRED")
    code, reason, _ = await _refused(call.get_operation(stub, call.grant(_expired_signer(grant_key))))
    assert (code, reason) == (grpc.StatusCode.UNAUTHENTICATED, "GRANT_EXPIRED")
    code, reason, _ = await _refused(call.get_operation(stub, call.grant(signer, idempotency_key="other")))
    assert (code, reason) == (grpc.StatusCode.PERMISSION_DENIED, "GRANT_MISMATCH")
    # Another tenant's genuine grant for the same key reads nothing: not found, like a missing key.
    code, reason, _ = await _refused(call.get_operation(stub, call.grant(signer, tenant="globex")))
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "OPERATION_NOT_FOUND")


async def test_preview_needs_a_grant_for_its_tool_and_arguments(
    stub: ToolHostServiceStub, signer: GrantSigner
) -> None:
    call = Call("refund.issue", REFUND)
    request = PreviewToolRequest(tool=call.tool, arguments_json=call.arguments_json)
    reply = await stub.PreviewTool(request, metadata=[(GRANT_HEADER, call.grant(signer))], timeout=10)
    assert "A100" in reply.impact_summary
    code, reason, _ = await _refused(stub.PreviewTool(request, timeout=10))
    assert (code, reason) == (grpc.StatusCode.UNAUTHENTICATED, "GRANT_REQUIRED")
    other = call.grant(signer, arguments_json=json.dumps({**REFUND, "amount": 9000}))
    code, reason, metadata = await _refused(
        stub.PreviewTool(request, metadata=[(GRANT_HEADER, other)], timeout=10)
    )
    assert (code, reason, metadata["fields"]) == (
        grpc.StatusCode.PERMISSION_DENIED,
        "GRANT_MISMATCH",
        "arguments_json",
    )


# --- rotation, encryption, startup -------------------------------------------------------------


async def _wait_until_invoke(
    stub: ToolHostServiceStub, make_grant: Any, *, ok: bool, within: float = 10.0
) -> Any:
    """Invoke fresh calls until one is accepted (``ok``) or refused; the key file is re-read lazily."""
    deadline = time.monotonic() + within
    while True:
        call = Call("orders.lookup", {"order_id": "A100"})
        try:
            response = await call.invoke(stub, make_grant(call))
        except grpc.aio.AioRpcError as exc:
            if not ok:
                return exc
        else:
            if ok:
                return response
        assert time.monotonic() < deadline, "the host did not pick up the new grant keys in time"
        await asyncio.sleep(0.1)


async def test_grant_keys_rotate_without_a_restart(tmp_path: Path, pki: DevPki) -> None:
    old_key, new_key = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    keys_file = tmp_path / "grant-keys.pem"
    keys_file.write_bytes(public_key_pem(old_key))
    old, new = GrantSigner(key=old_key), GrantSigner(key=new_key)
    with _secure_host(tmp_path / "host", pki, keys_file) as host:
        async with grpc.aio.secure_channel(host.address, _client_credentials(pki)) as channel:
            stub = ToolHostServiceStub(channel)
            await _wait_until_invoke(stub, lambda c: c.grant(old), ok=True)
            refused = await _wait_until_invoke(stub, lambda c: c.grant(new), ok=False)
            assert refused.code() == grpc.StatusCode.UNAUTHENTICATED
            keys_file.write_bytes(public_key_pem(old_key) + public_key_pem(new_key))  # trust both
            await _wait_until_invoke(stub, lambda c: c.grant(new), ok=True)
            await _wait_until_invoke(stub, lambda c: c.grant(old), ok=True)
            keys_file.write_bytes(public_key_pem(new_key))  # then drop the old key
            refused = await _wait_until_invoke(stub, lambda c: c.grant(old), ok=False)
            assert refused.code() == grpc.StatusCode.UNAUTHENTICATED
            await _wait_until_invoke(stub, lambda c: c.grant(new), ok=True)


async def test_encrypted_ledger_holds_no_results_in_clear_and_reads_back_after_restart(
    tmp_path: Path, pki: DevPki, grant_key: tuple[Path, Path], signer: GrantSigner
) -> None:
    key_file = tmp_path / "ledger-key.json"
    write_key_file(key_file)
    data_dir = tmp_path / "host"
    lookup = Call("orders.lookup", {"order_id": "A100"})
    missing = Call("orders.lookup", {"order_id": "Z77"})
    refund = Call("refund.issue", REFUND)
    answers: dict[str, InvokeToolResponse] = {}
    with _secure_host(data_dir, pki, grant_key[1], encryption_key_file=key_file) as host:
        async with grpc.aio.secure_channel(host.address, _client_credentials(pki)) as channel:
            stub = ToolHostServiceStub(channel)
            for call in (lookup, missing, refund):
                answers[call.key] = await call.invoke(stub, call.grant(signer))
        assert key_file.read_text() not in host.stderr_text()
    refund_id = json.loads(answers[refund.key].result_json)["refund_id"]
    assert (
        "Ada Lovelace" in answers[lookup.key].result_json
        and "not found" in answers[missing.key].error.message
    )
    ledger_bytes = b"".join(p.read_bytes() for p in data_dir.glob("ledger.sqlite*"))
    # Texts with spaces or quotes, which no base64 ciphertext can contain by chance.
    for secret in (
        "Ada Lovelace",
        "order 'Z77' not found",
        '"order_id": "Z77"',
        refund_id,
        '"status": "issued"',
    ):
        assert secret.encode() not in ledger_bytes, secret
    assert b"enc:v1:k1:" in ledger_bytes
    with _secure_host(data_dir, pki, grant_key[1], encryption_key_file=key_file) as host:
        async with grpc.aio.secure_channel(host.address, _client_credentials(pki)) as channel:
            stub = ToolHostServiceStub(channel)
            for call in (lookup, missing, refund):
                replayed = await call.invoke(stub, call.grant(signer))
                assert replayed.replayed
                replayed.replayed = False
                assert replayed == answers[call.key]
            operation = (await refund.get_operation(stub, refund.grant(signer))).operation
            assert json.loads(operation.result_json)["status"] == "issued"


def _run_host(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentrt.toolhost", "--data-dir", str(data_dir), "--no-entrypoints", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )


def test_a_public_listen_without_mtls_and_grants_exits_2(
    tmp_path: Path, pki: DevPki, grant_key: tuple[Path, Path]
) -> None:
    tls = ["--tls-cert", str(pki.server_cert_file), "--tls-key", str(pki.server_key_file)]
    tls += ["--client-ca", str(pki.ca_file)]
    for args, missing in (
        ([], "mTLS and call grants"),
        (tls, "call grants"),
        (["--grant-keys", str(grant_key[1])], "mTLS"),
    ):
        result = _run_host(tmp_path / "data", "--listen", "0.0.0.0:0", *args)
        assert result.returncode == 2, result.stderr
        assert f"refusing to listen on 0.0.0.0:0 without {missing}" in result.stderr
        assert result.stdout == ""
        assert not (tmp_path / "data").exists()


def test_a_public_listen_starts_with_insecure_and_says_so_loudly(tmp_path: Path) -> None:
    with spawn_tool_host(
        tmp_path / "data", plugins=PLUGINS, listen="0.0.0.0:0", extra_args=["--insecure"]
    ) as host:
        port = host.address.rpartition(":")[2]
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            reply = ToolHostServiceStub(channel).ListTools(ListToolsRequest(), timeout=10)
        assert reply.tools
        logs = host.stderr_text()
    assert "INSECURE (--insecure): serving 0.0.0.0:0 without mTLS and call grants" in logs


def test_a_loopback_host_without_grant_keys_warns_it_obeys_unsigned_calls(tmp_path: Path) -> None:
    with spawn_tool_host(tmp_path / "data", plugins=PLUGINS) as host:
        logs = host.stderr_text()
    assert "no --grant-keys: calls are obeyed without a call grant" in logs
