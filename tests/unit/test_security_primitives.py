"""The shared security primitives: payload cipher, call grants, TLS helpers (real crypto, no fakes)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentrt.toolhost.security import (
    DEFAULT_MAX_GRANT_LIFETIME_S,
    CipherError,
    GrantError,
    GrantSigner,
    GrantVerifier,
    PayloadCipher,
    generate_dev_pki,
    is_loopback_host,
    key_id,
    public_key_pem,
    write_key_file,
    write_signing_key,
)


def test_cipher_round_trips_binds_aad_and_reads_old_keys(tmp_path: Path) -> None:
    old = PayloadCipher(keys={"k1": b"a" * 32}, active="k1")
    sealed = old.seal("refund A100", aad="runs.input:r1")
    assert "refund" not in sealed and sealed.startswith("enc:v1:k1:")
    assert old.open(sealed, aad="runs.input:r1") == "refund A100"
    with pytest.raises(CipherError):
        old.open(sealed, aad="runs.input:r2")  # moved to another row
    rotated = PayloadCipher(keys={"k1": b"a" * 32, "k2": b"b" * 32}, active="k2")
    assert rotated.open(sealed, aad="runs.input:r1") == "refund A100"
    assert rotated.seal("x", aad="").startswith("enc:v1:k2:")
    assert rotated.open("written before encryption", aad="any") == "written before encryption"
    with pytest.raises(CipherError, match="unknown key"):
        PayloadCipher(keys={"k3": b"c" * 32}, active="k3").open(sealed, aad="runs.input:r1")
    with pytest.raises(CipherError):
        old.open("enc:v1:k1:!!!not-base64", aad="")


def test_cipher_key_files_are_checked_without_echoing_keys(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    write_key_file(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert PayloadCipher.from_file(path).active == "k1"
    bad = {
        "not json": "{",
        "no keys": json.dumps({"active": "k1"}),
        "short key": json.dumps({"active": "k1", "keys": {"k1": "c2hvcnQ="}}),
        "bad base64": json.dumps({"active": "k1", "keys": {"k1": "@@@@"}}),
        "active missing": json.dumps(
            {"active": "k9", "keys": {"k1": "YWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWE="}}
        ),
    }
    for name, text in bad.items():
        path.write_text(text)
        with pytest.raises(CipherError) as info:
            PayloadCipher.from_file(path)
        assert "YWFh" not in str(info.value), name
    with pytest.raises(CipherError, match="cannot read"):
        PayloadCipher.from_file(tmp_path / "missing.json")


def _signer_and_verifier(tmp_path: Path) -> tuple[GrantSigner, GrantVerifier, Path, Path]:
    key_file, pub_file = tmp_path / "grant.key", tmp_path / "grant.pub"
    key = write_signing_key(key_file)
    pub_file.write_bytes(public_key_pem(key))
    return GrantSigner(key_file=key_file), GrantVerifier(keys_file=pub_file), key_file, pub_file


def _sign(signer: GrantSigner, **overrides: object) -> str:
    fields: dict[str, object] = {
        "tenant": "acme",
        "run_id": "run-1",
        "call_id": "call_1_0",
        "idempotency_key": "key-1",
        "fencing_token": 3,
        "tool": "refund.issue",
        "arguments_json": '{"order_id": "A100"}',
    }
    fields.update(overrides)
    return signer.sign(**fields)  # type: ignore[arg-type]


def test_grants_bind_the_call_and_refuse_tampering(tmp_path: Path) -> None:
    signer, verifier, _, _ = _signer_and_verifier(tmp_path)
    grant = verifier.verify(_sign(signer))
    assert (grant.tenant, grant.run_id, grant.fencing_token, grant.tool) == (
        "acme",
        "run-1",
        3,
        "refund.issue",
    )
    header, _, signature = _sign(signer).split(".")
    forged_body = jwt.utils.base64url_encode(
        json.dumps({**jwt.decode(_sign(signer), options={"verify_signature": False}), "fen": 99}).encode()
    ).decode()
    cases = {
        "": "GRANT_REQUIRED",
        "x" * 5000: "GRANT_INVALID",
        "not.a.jwt": "GRANT_INVALID",
        f"{header}.{forged_body}.{signature}": "GRANT_INVALID",
        _sign(GrantSigner(key=Ed25519PrivateKey.generate())): "GRANT_UNKNOWN_KEY",
        _sign(
            GrantSigner(key_file=tmp_path / "grant.key", clock=lambda: time.time() - 3600)
        ): "GRANT_EXPIRED",
        _sign(signer, fencing_token=2**70): "GRANT_INVALID",
    }
    for token, reason in cases.items():
        with pytest.raises(GrantError) as info:
            verifier.verify(token)
        assert info.value.reason == reason, token[:40]
    unsigned = jwt.encode({"ten": "acme"}, key=None, algorithm="none")  # type: ignore[arg-type]
    with pytest.raises(GrantError):
        verifier.verify(unsigned)


def test_a_grant_living_longer_than_the_hosts_cap_is_refused(tmp_path: Path) -> None:
    signer, verifier, key_file, pub_file = _signer_and_verifier(tmp_path)
    for lifetime in (10**9, int(DEFAULT_MAX_GRANT_LIFETIME_S) + 1):
        with pytest.raises(GrantError) as info:
            verifier.verify(_sign(signer, ttl_s=lifetime))
        assert info.value.reason == "GRANT_TOO_LONG", lifetime
        assert "3600 s" in info.value.message
    # Issued long ago, it would still expire in time: its lifetime, not what is left of it, counts.
    backdated = GrantSigner(key_file=key_file, ttl_s=10**9, clock=lambda: time.time() - 10**8)
    with pytest.raises(GrantError) as info:
        verifier.verify(_sign(backdated))
    assert info.value.reason == "GRANT_TOO_LONG"
    # The longest ttl the runtime may sign with passes the default cap.
    assert verifier.verify(_sign(signer, ttl_s=DEFAULT_MAX_GRANT_LIFETIME_S)).tenant == "acme"
    tight = GrantVerifier(keys_file=pub_file, max_lifetime_s=30)
    assert tight.verify(_sign(signer, ttl_s=30)).tenant == "acme"
    with pytest.raises(GrantError) as info:
        tight.verify(_sign(signer, ttl_s=31))
    assert info.value.reason == "GRANT_TOO_LONG"


@pytest.mark.parametrize("cap", [0, -1, float("inf"), float("nan")])
def test_a_grant_lifetime_cap_must_be_positive_and_finite(tmp_path: Path, cap: float) -> None:
    _, _, _, pub_file = _signer_and_verifier(tmp_path)
    with pytest.raises(ValueError, match="positive and finite"):
        GrantVerifier(keys_file=pub_file, max_lifetime_s=cap)


def test_the_signer_states_the_lifetime_it_signs_with(tmp_path: Path) -> None:
    _, _, key_file, _ = _signer_and_verifier(tmp_path)
    for ttl, lifetime in ((0.2, 1), (1.0, 1), (2.6, 3), (3600.0, 3600)):
        claims = jwt.decode(
            _sign(GrantSigner(key_file=key_file, ttl_s=ttl)), options={"verify_signature": False}
        )
        assert (
            claims["exp"] - claims["iat"] == GrantSigner(key_file=key_file, ttl_s=ttl).lifetime_s == lifetime
        )


def test_grant_keys_rotate_by_file_without_restart(tmp_path: Path) -> None:
    now = [1_000_000.0]
    key_file, pub_file = tmp_path / "grant.key", tmp_path / "grant.pub"
    old = write_signing_key(key_file)
    pub_file.write_bytes(public_key_pem(old))
    signer = GrantSigner(key_file=key_file, clock=lambda: now[0])
    verifier = GrantVerifier(keys_file=pub_file, clock=lambda: now[0])
    old_token = _sign(signer)
    new = Ed25519PrivateKey.generate()
    pub_file.write_bytes(public_key_pem(old) + public_key_pem(new))  # hosts trust both first
    write_signing_key(key_file, new)  # then the runtime signs with the new one
    assert jwt.get_unverified_header(_sign(signer))["kid"] == key_id(old.public_key())  # not yet re-read
    now[0] += 2  # files are re-read at most once a second
    token = _sign(signer)
    assert jwt.get_unverified_header(token)["kid"] == key_id(new.public_key())
    assert verifier.verify(token).tenant == "acme"
    assert verifier.verify(old_token).tenant == "acme"
    pub_file.write_bytes(public_key_pem(new))  # the old key is dropped
    now[0] += 2
    with pytest.raises(GrantError) as info:
        verifier.verify(old_token)
    assert info.value.reason == "GRANT_UNKNOWN_KEY"
    now[0] += 3600
    with pytest.raises(GrantError) as info:
        verifier.verify(token)
    assert info.value.reason == "GRANT_EXPIRED"


def test_grants_are_standard_jwts_both_ways(tmp_path: Path) -> None:
    signer, verifier, key_file, _ = _signer_and_verifier(tmp_path)
    key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    assert isinstance(key, Ed25519PrivateKey)
    claims = jwt.decode(_sign(signer), key.public_key(), algorithms=["EdDSA"], audience="agentrt-toolhost")
    assert claims["ten"] == "acme" and claims["fen"] == 3
    by_library = jwt.encode(
        {**claims, "ten": "globex"}, key, algorithm="EdDSA", headers={"kid": key_id(key.public_key())}
    )
    assert verifier.verify(by_library).tenant == "globex"
    header, body, signature = _sign(signer).split(".")
    for bad in (f"{header}.{body}.{signature[:-2]}!!", f"{header}.{body}", "e30." * 2 + "e30.e30"):
        with pytest.raises(GrantError) as info:
            verifier.verify(bad)
        assert info.value.reason == "GRANT_INVALID", bad
    nested = jwt.utils.base64url_encode(b"[" * 2000 + b"]" * 2000).decode()
    with pytest.raises(GrantError):
        verifier.verify(f"{nested}.{body}.{signature}")


def test_dev_pki_files_and_loopback_names(tmp_path: Path) -> None:
    pki = generate_dev_pki(tmp_path / "pki", clients=["runtime", "alice"])
    assert sorted(pki.files()) == sorted(pki.directory.iterdir())
    assert {path.stat().st_mode & 0o777 for path in pki.files()} == {0o600}
    assert pki.directory.stat().st_mode & 0o777 == 0o700
    assert b"BEGIN CERTIFICATE" in pki.ca_file.read_bytes()
    assert all(is_loopback_host(h) for h in ("127.0.0.1", "127.1.2.3", "localhost", "[::1]", "::1"))
    assert not any(is_loopback_host(h) for h in ("0.0.0.0", "10.0.0.5", "example.com", "[::]"))


def test_a_dev_pki_replaces_nothing_unless_asked(tmp_path: Path) -> None:
    first = generate_dev_pki(tmp_path / "pki", clients=["alice"])
    before = {path: path.read_bytes() for path in first.files()}
    with pytest.raises(FileExistsError, match=r"ca\.pem"):
        generate_dev_pki(tmp_path / "pki", clients=["alice"])
    with pytest.raises(FileExistsError):  # one file in the way is enough, and nothing is written
        generate_dev_pki(tmp_path / "pki", clients=["bob"])
    assert {path: path.read_bytes() for path in first.files()} == before
    assert not (tmp_path / "pki" / "bob.pem").exists()
    # A name planted in the way (a symlink to a file of someone else's) is replaced, never followed.
    elsewhere = tmp_path / "elsewhere.pem"
    elsewhere.write_bytes(b"not yours")
    first.ca_file.unlink()
    first.ca_file.symlink_to(elsewhere)
    again = generate_dev_pki(tmp_path / "pki", clients=["alice"], overwrite=True)
    assert elsewhere.read_bytes() == b"not yours" and not again.ca_file.is_symlink()
    assert again.ca_key_file.read_bytes() != before[first.ca_key_file]
    assert {path.stat().st_mode & 0o777 for path in again.files()} == {0o600}


@pytest.mark.parametrize("name", ["../alice", "", ".hidden", "a/b", "ca", "server"])
def test_dev_pki_client_names_are_plain_and_distinct_file_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="client names"):
        generate_dev_pki(tmp_path / "pki", clients=[name])
    assert not (tmp_path / "pki").exists()


def test_a_server_trusting_two_dev_cas_accepts_clients_of_both(tmp_path: Path) -> None:
    import asyncio

    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    from agentrt.toolhost.security import ReloadingServerCredentials, channel_credentials

    first = generate_dev_pki(tmp_path / "a", clients=["one"])
    second = generate_dev_pki(tmp_path / "b", clients=["two"])
    bundle = tmp_path / "clients-ca.pem"
    bundle.write_bytes(first.ca_file.read_bytes() + second.ca_file.read_bytes())

    async def check() -> None:
        creds = ReloadingServerCredentials(
            cert_file=str(first.server_cert_file),
            key_file=str(first.server_key_file),
            client_ca_file=str(bundle),
        )
        server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)  # type: ignore[attr-defined]
        port = server.add_secure_port("127.0.0.1:0", creds.credentials)
        await server.start()
        try:
            for pki, name in ((first, "one"), (second, "two")):
                cert, key = pki.client_files[name]
                credentials = channel_credentials(
                    ca_file=str(first.ca_file), cert_file=str(cert), key_file=str(key)
                )
                async with grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials) as channel:
                    reply = await health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(), timeout=10
                    )
                    assert reply.status == health_pb2.HealthCheckResponse.SERVING
        finally:
            await server.stop(0)

    asyncio.run(check())
