"""The runtime's side of the hop to its tool hosts (R3.3, R10.2): mTLS, call grants, live rotation.

Real runtime and tool host processes; runs are driven through the Python client, and every
refund is counted in the refund plugin's own store.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.x509.oid import NameOID
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from agentrt.client import Client, event_type
from agentrt.plugins.demo_tools import count_refunds
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.proto.toolhost.v1.tool_host_service_pb2 import InvokeToolRequest, ListToolsRequest
from agentrt.proto.toolhost.v1.tool_host_service_pb2_grpc import ToolHostServiceStub
from agentrt.testing import RuntimeProcess, ToolHostProcess, spawn_runtime, spawn_tool_host, start_tool_host
from agentrt.toolhost.security import (
    GRANT_HEADER,
    DevPki,
    GrantSigner,
    channel_credentials,
    generate_dev_pki,
    issue_certificate,
    key_id,
    public_key_pem,
    write_key_file,
    write_signing_key,
)
from tests.e2e.conftest import agent_toml

PLUGINS = ("agentrt.plugins.demo_tools",)
RUNTIME_CLIENT = "agentrt-runtime"
# One cent a run: the rotation tests refund order A100 (120.00) as often as a fast machine manages
# while they wait for a reload, which may be thousands of times.
REFUND_STEPS = [
    {"text": "Looking up.", "tool_calls": [{"tool": "orders.lookup", "arguments": {"order_id": "A100"}}]},
    {
        "text": "Refunding.",
        "tool_calls": [
            {"tool": "refund.issue", "arguments": {"order_id": "A100", "amount": 0.01, "reason": "broken"}}
        ],
    },
    {"text": "Refunded 0.01 for A100."},
]
APPROVAL_STEPS = [
    {
        "text": "refunding a lot",
        "tool_calls": [
            {"tool": "refund.issue", "arguments": {"order_id": "A101", "amount": 30.0, "reason": "broken"}}
        ],
    },
    {"text": "done"},
]


def _agents() -> str:
    text = agent_toml(
        "refund", steps=REFUND_STEPS, tools=["orders.lookup", "refund.issue"], budgets={"timeout_s": 60}
    )
    text += agent_toml("approver", steps=APPROVAL_STEPS, tools=["refund.issue"], budgets={"timeout_s": 60})
    return text


def _host_toml(address: str, *, ca_file: Path, cert_file: Path, key_file: Path) -> str:
    return (
        f'[[tool_hosts]]\nname = "local"\naddress = "{address}"\n'
        f'ca_file = "{ca_file}"\ncert_file = "{cert_file}"\nkey_file = "{key_file}"\n'
    )


def _write_config(path: Path, *, db_url: str, hosts: str, extra: str = "") -> Path:
    text = f'db_url = "{db_url}"\nlease_ttl_s = 3.0\npoll_interval_s = 0.2\ngrace_s = 1.0\n'
    text += "tool_attempts = 10\nretry_cap_s = 1.0\n"
    path.write_text(text + extra + hosts + _agents())
    return path


def _runtime(
    config: Path, cwd: Path, *flags: str, env: dict[str, str] | None = None
) -> contextlib.AbstractContextManager[RuntimeProcess]:
    return spawn_runtime(["--config", str(config), "--listen", "127.0.0.1:0", *flags], cwd=cwd, env=env)


def _refund_run(runtime: RuntimeProcess) -> list[run_pb2.RunEvent]:
    with Client(runtime.address) as client:
        events = [e for e in client.run_agent("refund", "refund A100 please", timeout=60) if e.seq]
    assert event_type(events[-1]) == "run.ended", [event_type(e) for e in events]
    return events


def _refund_completed(events: list[run_pb2.RunEvent]) -> str:
    """The refund's result; fails unless the run completed with refund.issue succeeding."""
    failed = [e.tool_failed for e in events if event_type(e) == "tool.failed"]
    assert not failed, failed
    results = [e.tool_completed.result_json for e in events if e.tool_completed.tool == "refund.issue"]
    assert len(results) == 1, [event_type(e) for e in events]
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED, events[-1]
    return results[0]


def _secure_host(
    data_dir: Path, pki: DevPki, *, client_ca: Path, grant_keys: Path, listen: str = "127.0.0.1:0"
) -> ToolHostProcess:
    return start_tool_host(
        data_dir,
        plugins=PLUGINS,
        listen=listen,
        tls_cert=pki.server_cert_file,
        tls_key=pki.server_key_file,
        client_ca=client_ca,
        grant_keys=grant_keys,
    )


@contextlib.contextmanager
def _stopping(host: ToolHostProcess) -> Iterator[ToolHostProcess]:
    try:
        yield host
    finally:
        host.stop()


def _replace(path: Path, data: bytes) -> None:
    """Write a file the way rotation tools do: a new file renamed over the old one."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class Secured:
    """A CA for the host and the runtime's client certificate, a grant key, and the files both read."""

    def __init__(self, root: Path) -> None:
        self.pki = generate_dev_pki(root / "pki", clients=[RUNTIME_CLIENT])
        self.host_client_ca = root / "host-client-ca.pem"
        self.host_client_ca.write_bytes(self.pki.ca_file.read_bytes())
        runtime_dir = root / "runtime-secrets"
        runtime_dir.mkdir()
        self.cert_file, self.key_file = runtime_dir / "client.pem", runtime_dir / "client.key"
        cert, key = self.pki.client_files[RUNTIME_CLIENT]
        self.cert_file.write_bytes(cert.read_bytes())
        self.key_file.write_bytes(key.read_bytes())
        self.signing_key_file = runtime_dir / "grant.key"
        self.signing_key = write_signing_key(self.signing_key_file)
        self.grant_keys = root / "grant-keys.pem"
        self.grant_keys.write_bytes(public_key_pem(self.signing_key))

    def config(self, path: Path, *, db_url: str, address: str) -> Path:
        hosts = _host_toml(
            address, ca_file=self.pki.ca_file, cert_file=self.cert_file, key_file=self.key_file
        )
        grants = f'[grants]\nsigning_key_file = "{self.signing_key_file}"\n'
        return _write_config(path, db_url=db_url, hosts=hosts, extra=grants)


# --- a runtime against a host that obeys only it ----------------------------------------------


def test_a_run_completes_against_a_host_with_mtls_and_grants(tmp_path: Path, sqlite_url: str) -> None:
    secured = Secured(tmp_path)
    host = _secure_host(
        tmp_path / "host", secured.pki, client_ca=secured.host_client_ca, grant_keys=secured.grant_keys
    )
    with _stopping(host):
        config = secured.config(tmp_path / "agentrt.toml", db_url=sqlite_url, address=host.address)
        with _runtime(config, tmp_path) as runtime:
            result = _refund_completed(_refund_run(runtime))
            assert json.loads(result)["status"] == "issued"
            with Client(runtime.address) as client:
                events = [e for e in client.run_agent("approver", "refund A101", timeout=60) if e.seq]
            # The preview came from the host (a granted PreviewTool), not the runtime's fallback.
            approval = events[-1].approval_requested
            assert approval.tool == "refund.issue" and "no preview" not in approval.impact_summary
            assert "A101" in approval.impact_summary
            logs = runtime.stderr_text() + host.stderr_text()
        assert count_refunds(host.data_dir) == 1
    assert secured.signing_key_file.read_text() not in logs


def test_a_host_certificate_from_another_ca_is_never_called_and_the_log_says_why(
    tmp_path: Path, sqlite_url: str
) -> None:
    secured = Secured(tmp_path)
    impostor = generate_dev_pki(tmp_path / "impostor", clients=[])
    host = _secure_host(
        tmp_path / "host", impostor, client_ca=secured.host_client_ca, grant_keys=secured.grant_keys
    )
    with _stopping(host):
        config = secured.config(tmp_path / "agentrt.toml", db_url=sqlite_url, address=host.address)
        # The runtime serves without a host it cannot reach (it may be fixed later): the handshake
        # keeps failing, so its tools stay pending and nothing is ever sent to it.
        with _runtime(config, tmp_path) as runtime:
            stderr = runtime.stderr_text()
            assert runtime.process.poll() is None
    assert "tool host 'local'" in stderr and "does not answer ListTools over mTLS" in stderr
    assert "are pending" in stderr
    assert "handshake failed" in stderr.lower()  # the reason, not only a deadline
    assert count_refunds(host.data_dir) == 0


def test_unusable_runtime_tls_or_signing_key_files_exit_2(tmp_path: Path, sqlite_url: str) -> None:
    secured = Secured(tmp_path)
    other_key = tmp_path / "other.key"
    other_key.write_bytes(
        generate_dev_pki(tmp_path / "other", clients=["x"]).client_files["x"][1].read_bytes()
    )
    cases = {
        "missing CA": (
            _host_toml(
                "127.0.0.1:1",
                ca_file=tmp_path / "nope.pem",
                cert_file=secured.cert_file,
                key_file=secured.key_file,
            ),
            "",
            "cannot read CA",
        ),
        "mismatched key": (
            _host_toml(
                "127.0.0.1:1", ca_file=secured.pki.ca_file, cert_file=secured.cert_file, key_file=other_key
            ),
            "",
            "does not match the key",
        ),
        "bad signing key": (
            _host_toml(
                "127.0.0.1:1",
                ca_file=secured.pki.ca_file,
                cert_file=secured.cert_file,
                key_file=secured.key_file,
            ),
            f'[grants]\nsigning_key_file = "{secured.cert_file}"\n',
            "grants: signing_key_file",
        ),
    }
    for name, (hosts, extra, message) in cases.items():
        config = _write_config(tmp_path / f"{name}.toml", db_url=sqlite_url, hosts=hosts, extra=extra)
        runtime = RuntimeProcess(["--config", str(config), "--listen", "127.0.0.1:0"], cwd=tmp_path)
        try:
            assert runtime.wait_exit(timeout=60) == 2, name
            stderr = runtime.stderr_text()
        finally:
            runtime.close()
        assert message in stderr, (name, stderr[-2000:])
        assert "-----BEGIN" not in stderr, name  # no key material in the message


def test_a_public_host_address_without_tls_needs_insecure(tmp_path: Path, sqlite_url: str) -> None:
    with spawn_tool_host(
        tmp_path / "host", plugins=PLUGINS, listen="0.0.0.0:0", extra_args=["--insecure"]
    ) as host:
        # 0.0.0.0 reaches this machine, yet is no loopback address: the runtime wants mTLS to it.
        hosts = f'[[tool_hosts]]\nname = "local"\naddress = "{host.address}"\n'
        config = _write_config(tmp_path / "agentrt.toml", db_url=sqlite_url, hosts=hosts)
        runtime = RuntimeProcess(["--config", str(config), "--listen", "127.0.0.1:0"], cwd=tmp_path)
        try:
            assert runtime.wait_exit(timeout=60) == 2
            stderr = runtime.stderr_text()
        finally:
            runtime.close()
        assert f"tool host 'local' at {host.address} is not on loopback" in stderr
        with _runtime(config, tmp_path, "--insecure") as runtime:
            _refund_completed(_refund_run(runtime))
            assert "INSECURE (--insecure): calling tool host 'local'" in runtime.stderr_text()


# --- rotation under a live runtime --------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _second_ca_client(directory: Path) -> tuple[bytes, bytes, bytes]:
    """A CA named unlike the dev PKI's (a server picks the CA of a client certificate by name), and a
    runtime client certificate from it: ``(CA PEM, certificate PEM, key PEM)``."""
    directory.mkdir()
    ca_key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agentrt rotated CA")])
    now = datetime.datetime.now(datetime.UTC)
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    cert, key = issue_certificate(ca_cert=ca_cert, ca_key=ca_key, common_name=RUNTIME_CLIENT, client=True)
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return ca_cert.public_bytes(pem), cert.public_bytes(pem), key_pem


def _wait_until_trusted(host: ToolHostProcess, pki: DevPki, key: Ed25519PrivateKey) -> None:
    """Poll (bounded) until the host obeys grants signed with ``key``: it re-reads its key file lazily."""
    cert, client_key = pki.client_files[RUNTIME_CLIENT]
    credentials = channel_credentials(ca_file=str(pki.ca_file), cert_file=str(cert), key_file=str(client_key))
    arguments = json.dumps({"order_id": "A100"})
    deadline = time.monotonic() + 10
    with grpc.secure_channel(host.address, credentials) as channel:
        stub = ToolHostServiceStub(channel)
        while True:
            idempotency_key = f"probe-{time.monotonic_ns()}"
            grant = GrantSigner(key=key).sign(
                tenant="probe",
                run_id="probe",
                call_id="probe",
                idempotency_key=idempotency_key,
                fencing_token=0,
                tool="orders.lookup",
                arguments_json=arguments,
            )
            metadata = [
                ("x-agentrt-idempotency-key", idempotency_key),
                ("x-agentrt-run-id", "probe"),
                ("x-agentrt-call-id", "probe"),
                ("x-agentrt-fencing-token", "0"),
                (GRANT_HEADER, grant),
            ]
            try:
                stub.InvokeTool(
                    InvokeToolRequest(tool="orders.lookup", arguments_json=arguments),
                    metadata=metadata,
                    timeout=5,
                )
                return
            except grpc.RpcError:
                assert time.monotonic() < deadline, "the host did not pick up the new grant key"
                time.sleep(0.1)


def test_client_certificate_and_grant_key_rotate_under_a_live_runtime(
    tmp_path: Path, sqlite_url: str
) -> None:
    secured = Secured(tmp_path)
    listen = f"127.0.0.1:{_free_port()}"
    config = secured.config(tmp_path / "agentrt.toml", db_url=sqlite_url, address=listen)
    host_dir = tmp_path / "host"
    refunds = 0
    new_ca_pem, new_cert, new_key = _second_ca_client(tmp_path / "pki-2")
    new_signing_key = Ed25519PrivateKey.generate()
    host = _secure_host(
        host_dir, secured.pki, client_ca=secured.host_client_ca, grant_keys=secured.grant_keys, listen=listen
    )
    with _stopping(host), _runtime(config, tmp_path, "--log-level", "INFO") as runtime:
        _refund_completed(_refund_run(runtime))
        refunds += 1
        # 1. The host trusts the old and the new client CA and grant key.
        _replace(secured.host_client_ca, secured.pki.ca_file.read_bytes() + new_ca_pem)
        _replace(secured.grant_keys, public_key_pem(secured.signing_key) + public_key_pem(new_signing_key))
        _wait_until_trusted(host, secured.pki, new_signing_key)
        # 2. The runtime's files are rotated under it (key first: a moment of mismatch is skipped).
        _replace(secured.key_file, new_key)
        _replace(secured.cert_file, new_cert)
        write_signing_key(secured.signing_key_file, new_signing_key)
        # 3. Runs keep completing while the runtime picks the new files up on its own.
        new_kid = key_id(new_signing_key.public_key())
        deadline = time.monotonic() + 60
        while not (
            "TLS files of tool host 'local' changed" in (logs := runtime.stderr_text())
            and f"call grants are now signed with key {new_kid}" in logs
        ):
            assert time.monotonic() < deadline, logs[-3000:]
            _refund_completed(_refund_run(runtime))
            refunds += 1
        assert count_refunds(host_dir) == refunds
        # 4. The host drops the old CA and key and restarts: only the rotated material is accepted now.
        host.stop()
        _replace(secured.host_client_ca, new_ca_pem)
        _replace(secured.grant_keys, public_key_pem(new_signing_key))
        host = _secure_host(
            host_dir,
            secured.pki,
            client_ca=secured.host_client_ca,
            grant_keys=secured.grant_keys,
            listen=listen,
        )
        with _stopping(host):
            _refund_completed(_refund_run(runtime))
            refunds += 1
            assert count_refunds(host_dir) == refunds


# --- the spawned (demo) host -----------------------------------------------------------------


def _spawned_host_toml() -> str:
    return (
        '[[tool_hosts]]\nname = "local"\nspawn = true\nplugins = ["agentrt.plugins.demo_tools"]\n'
        "entrypoints = false\n"
    )


def _refusal(error: grpc.RpcError) -> tuple[grpc.StatusCode, str]:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None
    error_info = error_details_pb2.ErrorInfo()
    status.details[0].Unpack(error_info)
    return error.code(), error_info.reason  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("grants", "nap_s"),
    # One nap is enough: it outlives its grant (1 s) and the host's leeway on expiry (5 s).
    [("", 0.0), ("enabled = false\n", 6.5)],
    ids=["grants on", "grants off"],
)
def test_a_spawned_host_obeys_only_its_runtime_with_no_setup(
    tmp_path: Path, sqlite_url: str, grants: str, nap_s: float
) -> None:
    # Grants off concern hosts at an address: the runtime's own child still trusts only it.
    key_file = tmp_path / "payload-key.json"
    write_key_file(key_file)
    data_dir, temp = tmp_path / "data", tmp_path / "tmp"
    temp.mkdir()
    # Grants live 1 s and the child takes none longer, yet a tool may run longer than that: a
    # grant is checked as a call arrives.
    nap = {"text": "napping", "tool_calls": [{"tool": "sleep.wait", "arguments": {"seconds": nap_s}}]}
    napper = agent_toml(
        "napper", steps=[nap, {"text": "woke"}], tools=["sleep.wait"], budgets={"timeout_s": 60}
    )
    extra = f'data_dir = "{data_dir}"\n[encryption]\nkey_file = "{key_file}"\n[grants]\nttl_s = 1\n{grants}'
    extra += napper
    config = _write_config(
        tmp_path / "agentrt.toml", db_url=sqlite_url, hosts=_spawned_host_toml(), extra=extra
    )
    host_dir = data_dir / "toolhost-local"
    # TMPDIR: the runtime makes the child's private directory where this test can find it.
    with _runtime(config, tmp_path, env={**os.environ, "TMPDIR": str(temp)}) as runtime:
        result = _refund_completed(_refund_run(runtime))
        logs = runtime.stderr_text()
        found = re.search(r"serving \d+ tool\(s\) on (127\.0\.0\.1:\d+) \(mTLS, call grants verified\)", logs)
        assert found is not None, logs[-3000:]
        address = found.group(1)
        # What the child was given sits in one private directory, out of the data dir.
        (secrets,) = temp.glob("agentrt-toolhost-*")
        assert secrets.stat().st_mode & 0o777 == 0o700
        assert {p.stat().st_mode & 0o777 for p in secrets.iterdir()} == {0o600}
        assert (secrets / "grant-keys.pem").read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
        assert not (host_dir / "grant-keys.pem").exists() and not (host_dir / "tls").exists()
        with grpc.insecure_channel(address) as channel:
            with pytest.raises(grpc.RpcError) as info:
                ToolHostServiceStub(channel).ListTools(ListToolsRequest(), timeout=5)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
        # Even with the runtime's own client certificate, a call without the runtime's grant is refused.
        cert, key = secrets / f"{RUNTIME_CLIENT}.pem", secrets / f"{RUNTIME_CLIENT}.key"
        credentials = channel_credentials(
            ca_file=str(secrets / "ca.pem"), cert_file=str(cert), key_file=str(key)
        )
        arguments_json = json.dumps({"order_id": "A100", "amount": 1, "reason": "x"})
        request = InvokeToolRequest(tool="refund.issue", arguments_json=arguments_json)
        metadata = [
            ("x-agentrt-idempotency-key", "forged"),
            ("x-agentrt-run-id", "r"),
            ("x-agentrt-call-id", "c"),
        ]
        # A genuine-looking grant for exactly this call, signed by a key of the caller's own.
        forged = GrantSigner(key=Ed25519PrivateKey.generate()).sign(
            tenant="",
            run_id="r",
            call_id="c",
            idempotency_key="forged",
            fencing_token=0,
            tool="refund.issue",
            arguments_json=arguments_json,
        )
        with grpc.secure_channel(address, credentials) as channel:
            stub = ToolHostServiceStub(channel)
            assert stub.ListTools(ListToolsRequest(), timeout=5).tools
            for grant, reason in ((None, "GRANT_REQUIRED"), (forged, "GRANT_UNKNOWN_KEY")):
                sent = metadata if grant is None else [*metadata, (GRANT_HEADER, grant)]
                with pytest.raises(grpc.RpcError) as info:
                    stub.InvokeTool(request, metadata=sent, timeout=5)
                assert _refusal(info.value) == (grpc.StatusCode.UNAUTHENTICATED, reason)
        assert count_refunds(host_dir) == 1
        # ...and the runtime is still served, a call outliving its grant too.
        _refund_completed(_refund_run(runtime))
        assert count_refunds(host_dir) == 2
        with Client(runtime.address) as client:
            napped = [e for e in client.run_agent("napper", "nap", timeout=60) if e.seq]
        assert [e.tool_completed.tool for e in napped if event_type(e) == "tool.completed"] == ["sleep.wait"]
        assert napped[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED, napped[-1]
    assert not secrets.exists()  # removed with the child
    refund_id = json.loads(result)["refund_id"]
    ledger_bytes = b"".join(p.read_bytes() for p in host_dir.glob("ledger.sqlite*"))
    assert refund_id.encode() not in ledger_bytes and b"Ada Lovelace" not in ledger_bytes
    assert b"enc:v1:" in ledger_bytes
    assert b"forged" not in ledger_bytes  # the refused calls wrote nothing


def test_rotating_the_signing_key_never_locks_out_a_spawned_host(tmp_path: Path, sqlite_url: str) -> None:
    # A spawned host trusts a key of the runtime's own, not the configured one, which may rotate
    # (for the hosts at an address) while the child lives.
    signing_key_file = tmp_path / "grant.key"
    write_signing_key(signing_key_file)
    hosts = (
        '[[tool_hosts]]\nname = "local"\nspawn = true\nplugins = ["agentrt.plugins.demo_tools"]\n'
        "entrypoints = false\n"
    )
    extra = f'data_dir = "{tmp_path / "data"}"\n[grants]\nsigning_key_file = "{signing_key_file}"\n'
    config = _write_config(tmp_path / "agentrt.toml", db_url=sqlite_url, hosts=hosts, extra=extra)
    with _runtime(config, tmp_path) as runtime:
        _refund_completed(_refund_run(runtime))
        write_signing_key(signing_key_file)  # a new key under the live runtime
        # Signers re-read their file at most once a second: keep calling past that, at most 100 runs,
        # the last one after the re-read interval has certainly passed.
        deadline = time.monotonic() + 2.5
        for _ in range(100):
            if time.monotonic() >= deadline:
                break
            _refund_completed(_refund_run(runtime))
        time.sleep(max(0.0, deadline - time.monotonic()))
        _refund_completed(_refund_run(runtime))
