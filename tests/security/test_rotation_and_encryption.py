"""Keys change under a live deployment and runs keep going; payloads at rest are sealed."""

from __future__ import annotations

import json
import socket
import ssl
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import grpc
import psycopg
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentrt.client import event_type
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.proto.toolhost.v1 import tool_host_service_pb2 as svc
from agentrt.proto.toolhost.v1 import tool_host_service_pb2_grpc as svc_grpc
from agentrt.testing import spawn_runtime
from agentrt.toolhost.security import (
    DevPki,
    GrantSigner,
    issue_certificate,
    public_key_pem,
    write_signing_key,
)
from tests.e2e.conftest import agent_toml
from tests.security.conftest import SecureStack, secure_stack


def poll(condition: Callable[[], bool], *, within: float = 15.0, what: str) -> None:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within}s: {what}")
        time.sleep(0.05)


def reissue(pki: DevPki, cert_path: Path, key_path: Path, *, client: bool, name: str) -> x509.Certificate:
    """A new certificate and key from the same CA, written over the old files (key file first)."""
    ca_cert = x509.load_pem_x509_certificate(pki.ca_file.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca_key_file.read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    hosts = () if client else ("127.0.0.1", "localhost")
    cert, key = issue_certificate(
        ca_cert=ca_cert, ca_key=ca_key, common_name=name, hosts=hosts, client=client
    )
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert


def served_serial(address: str, ca_file: Path, client: tuple[Path, Path] | None = None) -> int:
    context = ssl.create_default_context(cafile=str(ca_file))
    context.set_alpn_protocols(["h2"])
    if client is not None:
        context.load_cert_chain(str(client[0]), str(client[1]))
    host, _, port = address.rpartition(":")
    with (
        socket.create_connection((host, int(port)), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def run_small_refund(stack: SecureStack) -> None:
    with stack.client("alice") as alice:
        events = [e for e in alice.run_agent("small-refund", "refund A100", timeout=60) if e.seq]
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED, [event_type(e) for e in events]


def host_accepts(stack: SecureStack, signer: GrantSigner) -> bool:
    """Whether the tool host takes a grant from ``signer`` (a read-only echo; nothing to undo)."""
    arguments = json.dumps({"text": "probe"})
    key = f"probe-{uuid.uuid4().hex}"
    grant = signer.sign(
        tenant="acme",
        run_id="probe",
        call_id="probe",
        idempotency_key=key,
        fencing_token=1,
        tool="noop.echo",
        arguments_json=arguments,
    )
    metadata = [
        ("x-agentrt-idempotency-key", key),
        ("x-agentrt-run-id", "probe"),
        ("x-agentrt-call-id", "probe"),
        ("x-agentrt-fencing-token", "1"),
        ("x-agentrt-call-grant", grant),
    ]
    with stack.host_channel() as channel:
        try:
            svc_grpc.ToolHostServiceStub(channel).InvokeTool(
                svc.InvokeToolRequest(tool="noop.echo", arguments_json=arguments),
                metadata=metadata,
                timeout=10,
            )
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAUTHENTICATED, exc
            return False
    return True


def test_tls_certificates_and_the_grant_key_rotate_under_live_servers(tmp_path: Path) -> None:
    with secure_stack(tmp_path, f"sqlite:///{tmp_path / 'agentrt.sqlite'}") as stack:
        run_small_refund(stack)
        with stack.client("alice") as alice:  # a run in flight across the rotation
            events = list(alice.run_agent("refunder", "refund A100 please", timeout=60))
            assert event_type(events[-2]) == "approval.requested" and events[-1].run_waiting.reason
            paused = alice.get_run(events[0].run_id)

        # 1. The runtime API's certificate: new handshakes get the new one.
        before = served_serial(stack.runtime.address, stack.api_pki.ca_file)
        new_api = reissue(
            stack.api_pki,
            stack.api_pki.server_cert_file,
            stack.api_pki.server_key_file,
            client=False,
            name="api2",
        )
        assert new_api.serial_number != before
        poll(
            lambda: served_serial(stack.runtime.address, stack.api_pki.ca_file) == new_api.serial_number,
            what="the runtime serves its new certificate",
        )
        run_small_refund(stack)

        # 2. The tool host's certificate, and the runtime's client certificate for it.
        client_files = stack.host_pki.client_files["agentrt-runtime"]
        new_host = reissue(
            stack.host_pki,
            stack.host_pki.server_cert_file,
            stack.host_pki.server_key_file,
            client=False,
            name="h2",
        )
        poll(
            lambda: (
                served_serial(stack.host.address, stack.host_pki.ca_file, client_files)
                == new_host.serial_number
            ),
            what="the tool host serves its new certificate",
        )
        reissue(stack.host_pki, *client_files, client=True, name="agentrt-runtime")
        run_small_refund(stack)

        # 3. The grant key: hosts trust the new key first, the runtime signs with it, the old one goes.
        old_key = serialization.load_pem_private_key(stack.grant_key.read_bytes(), password=None)
        assert isinstance(old_key, Ed25519PrivateKey)
        new_key = Ed25519PrivateKey.generate()
        stack.grant_public.write_bytes(public_key_pem(old_key) + public_key_pem(new_key))
        poll(lambda: host_accepts(stack, GrantSigner(key=new_key)), what="the host trusts the new grant key")
        write_signing_key(stack.grant_key, new_key)
        run_small_refund(stack)
        stack.grant_public.write_bytes(public_key_pem(new_key))
        poll(
            lambda: not host_accepts(stack, GrantSigner(key=old_key)), what="the host drops the old grant key"
        )
        run_small_refund(stack)

        # The run paused before all of it resumes and completes under the new material.
        pending = paused.pending_approval
        with stack.client("bob") as bob:
            bob.resolve_approval(
                paused.run_id,
                pending.approval_id,
                approve=True,
                args_hash=pending.args_hash,
                expected_revision=paused.revision,
            )
            events = [e for e in bob.stream_events(paused.run_id, follow=True, timeout=60) if e.seq]
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
        assert stack.runtime.process.poll() is None and stack.host.process.poll() is None


MARKERS = {
    "input": f"MARKER-INPUT-{uuid.uuid4().hex}",
    "argument": f"MARKER-ARG-{uuid.uuid4().hex}",
    "answer": f"MARKER-ANSWER-{uuid.uuid4().hex}",
}
SEALED_STEPS = [
    {"text": "echoing", "tool_calls": [{"tool": "noop.echo", "arguments": {"text": MARKERS["argument"]}}]},
    {"text": MARKERS["answer"]},
]


def raw_database_bytes(db_url: str, files: list[Path]) -> bytes:
    """Everything the database holds, as raw bytes: its files for SQLite, every table for PostgreSQL."""
    if db_url.startswith("sqlite"):
        return b"".join(p.read_bytes() for p in files if p.exists())
    dump = bytearray()
    with psycopg.connect(db_url, autocommit=True) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            )
        ]
        assert "runs" in tables and "run_events" in tables
        for table in tables:
            with conn.cursor().copy(f'COPY "{table}" TO STDOUT') as copy:
                for chunk in copy:
                    dump += bytes(chunk)
    return bytes(dump)


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_payloads_are_sealed_at_rest_and_read_back_after_a_restart(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    db_file = tmp_path / "agentrt.sqlite"
    db_url = f"sqlite:///{db_file}" if backend == "sqlite" else str(request.getfixturevalue("pg_url"))
    extra = agent_toml("sealed", steps=SEALED_STEPS, tools=["noop.echo"], budgets={"timeout_s": 60})
    with secure_stack(tmp_path, db_url, extra_config=extra, encryption=True) as stack:
        with stack.client("alice") as alice:
            events = [e for e in alice.run_agent("sealed", MARKERS["input"], timeout=60) if e.seq]
        run_id = events[0].run_id
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
        stack.runtime.stop()
        files = [db_file, Path(f"{db_file}-wal"), Path(f"{db_file}-shm")]
        raw = raw_database_bytes(db_url, files)
        ledger = b"".join(p.read_bytes() for p in stack.host.data_dir.glob("ledger.sqlite*") if p.is_file())
        for name, marker in MARKERS.items():
            assert marker.encode() not in raw, f"{name} in clear in the runtime's database"
            assert marker.encode() not in ledger, f"{name} in clear in the tool host's ledger"
        with spawn_runtime(["--config", str(stack.config_path)], cwd=tmp_path) as restarted:
            stack.runtime = restarted
            with stack.client("alice") as alice:
                run = alice.get_run(run_id)
                assert run.input == MARKERS["input"] and run.output == MARKERS["answer"]
                replayed = list(alice.stream_events(run_id, timeout=30))
        assert [e.seq for e in replayed] == [e.seq for e in events]
        completed = next(e.tool_completed for e in replayed if e.HasField("tool_completed"))
        assert MARKERS["argument"] in completed.result_json
