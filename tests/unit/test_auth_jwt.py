"""JWT bearer tokens: real keys and signatures (RSA, EC, Ed25519), JWKS files, every refusal."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from agentrt.server.auth import AuthRequest, JwtVerifier, build_authentication
from agentrt.server.config import AuthConfig, JwtConfig
from agentrt.server.core import NotAuthenticated

ISS = "https://idp.example"
AUD = "agentrt"
Key = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


@pytest.fixture(scope="module")
def keys() -> dict[str, Key]:
    return {
        "rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "rsa2": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "ec": ec.generate_private_key(ec.SECP256R1()),
        "ed": ed25519.Ed25519PrivateKey.generate(),
    }


def jwk(key: Key, kid: str, **extra: str) -> dict[str, Any]:
    public = key.public_key()
    if isinstance(public, rsa.RSAPublicKey):
        data = RSAAlgorithm.to_jwk(public, as_dict=True)
    elif isinstance(public, ec.EllipticCurvePublicKey):
        data = ECAlgorithm.to_jwk(public, as_dict=True)
    else:
        data = OKPAlgorithm.to_jwk(public, as_dict=True)
    return {**data, "kid": kid, **extra}


def write_jwks(path: Path, *entries: dict[str, Any]) -> Path:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"keys": list(entries)}))
    os.replace(tmp, path)
    return path


def pem(key: Key) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def token(key: Key, alg: str, *, kid: str | None = None, **claims: Any) -> str:
    payload: dict[str, Any] = {
        "iss": ISS,
        "aud": AUD,
        "exp": int(time.time()) + 300,
        "sub": "alice",
        "tenant": "acme",
        "roles": ["runner"],
    }
    payload.update(claims)
    payload = {k: v for k, v in payload.items() if v is not None}
    return jwt.encode(payload, key, algorithm=alg, headers={"kid": kid} if kid else None)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forged(header: dict[str, Any], payload: dict[str, Any], sign: Callable[[bytes], bytes]) -> str:
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    return f"{signing_input}.{b64(sign(signing_input.encode()))}"


def claims(**extra: Any) -> dict[str, Any]:
    return {"iss": ISS, "aud": AUD, "exp": int(time.time()) + 300, "sub": "eve", "tenant": "acme", **extra}


def config(**overrides: Any) -> JwtConfig:
    return JwtConfig(**{"issuer": ISS, "audience": AUD, **overrides})


@pytest.fixture()
def jwks_file(tmp_path: Path, keys: dict[str, Key]) -> Path:
    return write_jwks(
        tmp_path / "jwks.json", jwk(keys["rsa"], "r1"), jwk(keys["ec"], "e1"), jwk(keys["ed"], "d1")
    )


def refusal(verifier: JwtVerifier, presented: str) -> NotAuthenticated:
    with pytest.raises(NotAuthenticated) as refused:
        verifier.authenticate_token(presented)
    assert presented not in refused.value.message
    assert all(presented not in value for value in refused.value.metadata.values())
    return refused.value


@pytest.mark.parametrize(
    ("name", "alg", "kid"), [("rsa", "RS256", "r1"), ("ec", "ES256", "e1"), ("ed", "EdDSA", "d1")]
)
def test_each_key_type_from_a_jwks_file_verifies(
    jwks_file: Path, keys: dict[str, Key], name: str, alg: str, kid: str
) -> None:
    verifier = JwtVerifier(config=config(jwks_file=str(jwks_file)))
    principal = verifier.authenticate_token(
        token(keys[name], alg, kid=kid, roles=["runner", "approver", "root"])
    )
    assert (principal.subject, principal.tenant) == ("alice", "acme")
    assert principal.roles == frozenset({"runner", "approver"})  # the unknown role is dropped
    assert principal.authenticated_by == "jwt"
    # Without a kid every key that fits the algorithm is tried.
    assert verifier.authenticate_token(token(keys[name], alg)).subject == "alice"


def test_claim_names_are_configurable_and_roles_may_be_a_space_separated_string(
    jwks_file: Path, keys: dict[str, Key]
) -> None:
    verifier = JwtVerifier(
        config=config(
            jwks_file=str(jwks_file), subject_claim="email", tenant_claim="org", roles_claim="scope"
        )
    )
    presented = token(
        keys["ed"], "EdDSA", kid="d1", email="a@acme.example", org="acme", scope="approver  operator x"
    )
    principal = verifier.authenticate_token(presented)
    assert principal.subject == "a@acme.example" and principal.tenant == "acme"
    assert principal.roles == frozenset({"approver", "operator"})
    no_roles = verifier.authenticate_token(token(keys["ed"], "EdDSA", email="b@x", org="acme", scope=None))
    assert no_roles.roles == frozenset()


def test_inline_pem_keys_verify_without_a_kid(keys: dict[str, Key]) -> None:
    verifier = JwtVerifier(config=config(public_keys=[pem(keys["rsa"]), pem(keys["ed"])]))
    assert verifier.authenticate_token(token(keys["rsa"], "RS256")).subject == "alice"
    assert verifier.authenticate_token(token(keys["ed"], "EdDSA", kid="whatever")).subject == "alice"
    assert refusal(verifier, token(keys["rsa2"], "RS256")).reason == "TOKEN_BAD_SIGNATURE"


def test_the_key_is_picked_by_kid(tmp_path: Path, keys: dict[str, Key]) -> None:
    path = write_jwks(tmp_path / "jwks.json", jwk(keys["rsa"], "k1"), jwk(keys["rsa2"], "k2"))
    verifier = JwtVerifier(config=config(jwks_file=str(path)))
    assert verifier.authenticate_token(token(keys["rsa2"], "RS256", kid="k2")).subject == "alice"
    assert verifier.verifications == 1  # straight to k2, not k1 first
    assert refusal(verifier, token(keys["rsa2"], "RS256", kid="k9")).reason == "TOKEN_KEY_UNKNOWN"
    assert refusal(verifier, token(keys["rsa2"], "RS256", kid="k1")).reason == "TOKEN_BAD_SIGNATURE"
    assert verifier.authenticate_token(token(keys["rsa2"], "RS256")).subject == "alice"


def test_a_jwks_entry_with_alg_is_used_for_that_algorithm_only(tmp_path: Path, keys: dict[str, Key]) -> None:
    path = write_jwks(tmp_path / "jwks.json", jwk(keys["rsa"], "k1", alg="PS256"))
    verifier = JwtVerifier(config=config(jwks_file=str(path), algorithms=["RS256", "PS256"]))
    assert verifier.authenticate_token(token(keys["rsa"], "PS256", kid="k1")).subject == "alice"
    assert refusal(verifier, token(keys["rsa"], "RS256", kid="k1")).reason == "TOKEN_KEY_UNKNOWN"


def test_alg_none_and_hmac_key_confusion_are_refused_before_verification(
    jwks_file: Path, keys: dict[str, Key]
) -> None:
    verifier = JwtVerifier(config=config(jwks_file=str(jwks_file), public_keys=[pem(keys["rsa"])]))
    unsigned = jwt.encode(claims(), "", algorithm="none")
    # The classic confusion: HS256 keyed with the server's own public key, PEM or JWK text.
    public_pem = pem(keys["rsa"]).encode()
    confused = forged(
        {"alg": "HS256", "typ": "JWT"},
        claims(roles=["admin"]),
        lambda data: hmac.new(public_pem, data, hashlib.sha256).digest(),
    )
    confused_kid = forged(
        {"alg": "HS256", "kid": "r1"},
        claims(roles=["admin"]),
        lambda data: hmac.new(json.dumps(jwk(keys["rsa"], "r1")).encode(), data, hashlib.sha256).digest(),
    )
    for presented in (unsigned, confused, confused_kid):
        refused = refusal(verifier, presented)
        assert refused.reason == "TOKEN_ALGORITHM_REJECTED", refused
    assert verifier.verifications == 0
    # An asymmetric algorithm that is not configured is refused the same way.
    assert refusal(verifier, token(keys["rsa"], "RS384", kid="r1")).reason == "TOKEN_ALGORITHM_REJECTED"


def test_every_refusal_has_its_own_reason_and_never_echoes_the_token(
    jwks_file: Path, keys: dict[str, Key], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    verifier = JwtVerifier(config=config(jwks_file=str(jwks_file), leeway_s=30))
    now = int(time.time())
    rsa_key = keys["rsa"]
    good = token(rsa_key, "RS256", kid="r1")
    head, _, signature = good.split(".")
    other_body = b64(json.dumps(claims(roles=["admin"])).encode())
    cases: list[tuple[str, str, dict[str, str]]] = [
        (token(rsa_key, "RS256", kid="r1", exp=now - 120), "TOKEN_EXPIRED", {}),
        (token(rsa_key, "RS256", kid="r1", nbf=now + 120), "TOKEN_NOT_YET_VALID", {}),
        (token(rsa_key, "RS256", kid="r1", iat=now + 120), "TOKEN_NOT_YET_VALID", {}),
        (token(rsa_key, "RS256", kid="r1", iss="https://evil.example"), "TOKEN_WRONG_ISSUER", {}),
        (token(rsa_key, "RS256", kid="r1", aud="other-service"), "TOKEN_WRONG_AUDIENCE", {}),
        (token(rsa_key, "RS256", kid="r1", exp=None), "TOKEN_MISSING_CLAIM", {"claim": "exp"}),
        (token(rsa_key, "RS256", kid="r1", iss=None), "TOKEN_MISSING_CLAIM", {"claim": "iss"}),
        (token(rsa_key, "RS256", kid="r1", aud=None), "TOKEN_MISSING_CLAIM", {"claim": "aud"}),
        (token(rsa_key, "RS256", kid="r1", tenant=None), "TOKEN_MISSING_CLAIM", {"claim": "tenant"}),
        (token(rsa_key, "RS256", kid="r1", sub=None), "TOKEN_MISSING_CLAIM", {"claim": "sub"}),
        (token(rsa_key, "RS256", kid="r1", tenant=""), "TOKEN_MISSING_CLAIM", {"claim": "tenant"}),
        (token(rsa_key, "RS256", kid="r1", tenant=7), "TOKEN_BAD_CLAIM", {"claim": "tenant"}),
        (token(rsa_key, "RS256", kid="r1", tenant="t" * 129), "TOKEN_BAD_CLAIM", {"claim": "tenant"}),
        (token(rsa_key, "RS256", kid="r1", roles={"admin": True}), "TOKEN_BAD_CLAIM", {"claim": "roles"}),
        (f"{head}.{other_body}.{signature}", "TOKEN_BAD_SIGNATURE", {}),
        (token(keys["rsa2"], "RS256", kid="r1"), "TOKEN_BAD_SIGNATURE", {}),
        (token(keys["rsa2"], "RS256", kid="nope"), "TOKEN_KEY_UNKNOWN", {}),
        ("eyJub3Q.anNvbg.sig", "TOKEN_MALFORMED", {}),
        (forged({"alg": "RS256", "kid": 5}, claims(), lambda d: b"x"), "TOKEN_MALFORMED", {}),
        (f"{head}.!!!.{signature}", "TOKEN_MALFORMED", {}),
    ]
    for presented, reason, metadata in cases:
        refused = refusal(verifier, presented)
        assert (refused.reason, refused.metadata) == (reason, {"authenticator": "jwt", **metadata}), (
            reason,
            refused.message,
        )
    # Within the leeway an expired token still passes.
    assert verifier.authenticate_token(token(rsa_key, "RS256", kid="r1", exp=now - 5)).subject == "alice"
    for presented, _, _ in cases:
        assert presented not in caplog.text
        assert presented.split(".")[2] not in caplog.text or not presented.split(".")[2]


def test_a_verified_token_is_cached_until_its_exp(jwks_file: Path, keys: dict[str, Key]) -> None:
    verifier = JwtVerifier(config=config(jwks_file=str(jwks_file), leeway_s=0))
    long_lived = token(keys["ec"], "ES256", kid="e1")
    for _ in range(100):
        assert verifier.authenticate_token(long_lived).subject == "alice"
    assert verifier.verifications == 1

    short = token(keys["ec"], "ES256", kid="e1", exp=int(time.time()) + 1)
    assert verifier.authenticate_token(short).subject == "alice"
    deadline = time.monotonic() + 5.0
    while True:  # the cached entry must not outlive exp: poll with a bound
        try:
            verifier.authenticate_token(short)
        except NotAuthenticated as exc:
            assert exc.reason == "TOKEN_EXPIRED"
            break
        assert time.monotonic() < deadline, "an expired token was still accepted from the cache"
        time.sleep(0.05)


def test_the_cache_is_bounded_lru(jwks_file: Path, keys: dict[str, Key]) -> None:
    verifier = JwtVerifier(config=config(jwks_file=str(jwks_file)), cache_size=2)
    first, second, third = (token(keys["ed"], "EdDSA", kid="d1", sub=f"s{i}") for i in range(3))
    for presented in (first, second, first, third):  # third evicts second, the least recently used
        verifier.authenticate_token(presented)
    assert verifier.verifications == 3
    verifier.authenticate_token(first)
    assert verifier.verifications == 3
    verifier.authenticate_token(second)
    assert verifier.verifications == 4


def test_a_rotated_jwks_takes_effect_without_a_restart_and_drops_cached_tokens(
    tmp_path: Path, keys: dict[str, Key], caplog: pytest.LogCaptureFixture
) -> None:
    path = write_jwks(tmp_path / "jwks.json", jwk(keys["rsa"], "k1"))
    now = [0.0]
    verifier = JwtVerifier(config=config(jwks_file=str(path)), clock=lambda: now[0])
    old = token(keys["rsa"], "RS256", kid="k1")
    new = token(keys["rsa2"], "RS256", kid="k2")
    assert verifier.authenticate_token(old).subject == "alice"
    assert refusal(verifier, new).reason == "TOKEN_KEY_UNKNOWN"

    write_jwks(path, jwk(keys["rsa2"], "k2"))
    now[0] = 1.0
    assert verifier.authenticate_token(new).subject == "alice"
    assert refusal(verifier, old).reason == "TOKEN_KEY_UNKNOWN"  # cached before, still refused now

    caplog.set_level(logging.WARNING)
    path.write_text('{"keys": [')  # a broken rewrite keeps the last good key set
    now[0] = 2.0
    assert verifier.authenticate_token(new).subject == "alice"
    assert "JWKS file" in caplog.text and "keeping the previous content" in caplog.text


def test_jwks_files_are_validated_without_echoing_key_material(
    tmp_path: Path, keys: dict[str, Key], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    path = tmp_path / "jwks.json"
    secret = "c2VjcmV0LWhtYWMta2V5LW5ldmVyLXRvLWJlLXNob3du"
    rsa_key = keys["rsa"]
    assert isinstance(rsa_key, rsa.RSAPrivateKey)
    private = RSAAlgorithm.to_jwk(rsa_key, as_dict=True)
    bad: dict[str, str] = {
        "{": "not JSON",
        "[]": 'no "keys" list',
        json.dumps({"keys": [{"kty": "oct", "k": secret, "kid": "h"}]}): "no key usable",
        json.dumps({"keys": [{"kty": "RSA", "n": secret, "e": "AQAB"}]}): "no key usable",
        json.dumps({"keys": [{**jwk(keys["ec"], "enc"), "use": "enc"}]}): "no key usable",
        json.dumps({"keys": [jwk(keys["ed"], "d1")]}): "no key usable",  # EdDSA not configured
    }
    for text, expected in bad.items():
        path.write_text(text)
        with pytest.raises(ValueError) as failed:
            JwtVerifier(config=config(jwks_file=str(path), algorithms=["RS256", "ES256"]))
        message = str(failed.value)
        assert message.startswith(f"JWKS file {path}: ") and expected in message, message
        assert secret not in message
    assert secret not in caplog.text

    # A private JWK by mistake: only its public half is used, and nothing of it is logged.
    path.write_text(json.dumps({"keys": [{**private, "kid": "p1"}]}))
    verifier = JwtVerifier(config=config(jwks_file=str(path)))
    assert verifier.authenticate_token(token(keys["rsa"], "RS256", kid="p1")).subject == "alice"
    assert private["d"] not in caplog.text


def test_configuration_errors_name_the_problem(keys: dict[str, Key], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown algorithms"):
        JwtVerifier(config=config(public_keys=[pem(keys["rsa"])], algorithms=["RS999"]))
    with pytest.raises(ValueError, match=r"public_keys\[0\] is not a PEM public key"):
        JwtVerifier(config=config(public_keys=["-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----"]))
    with pytest.raises(ValueError, match=r"public_keys\[1\] fits none of the accepted algorithms"):
        JwtVerifier(config=config(public_keys=[pem(keys["rsa"]), pem(keys["ec"])], algorithms=["RS256"]))
    with pytest.raises(ValueError, match="cannot read JWKS file"):
        JwtVerifier(config=config(jwks_file=str(tmp_path / "missing.json")))
    with pytest.raises(ValueError, match="only asymmetric"):
        config(public_keys=[pem(keys["rsa"])], algorithms=["HS256"])


def test_the_built_chain_sends_jwt_shaped_tokens_to_the_verifier(
    jwks_file: Path, keys: dict[str, Key]
) -> None:
    authentication = build_authentication(AuthConfig(jwt=config(jwks_file=str(jwks_file))), local=None)
    presented = token(keys["ed"], "EdDSA", kid="d1", tenant="zeta")
    request = AuthRequest(method="/m", metadata={"authorization": f"Bearer {presented}"}, peer=None)
    assert authentication.authenticate(request).tenant == "zeta"
    opaque = AuthRequest(method="/m", metadata={"authorization": "Bearer opaque-token"}, peer=None)
    with pytest.raises(NotAuthenticated) as refused:
        authentication.authenticate(opaque)
    assert refused.value.reason == "TOKEN_MALFORMED"
