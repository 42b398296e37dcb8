"""JWT bearer tokens verified with PyJWT against a JWKS file or inline public keys.

Only the configured asymmetric algorithms are accepted, and keys are public key objects, never
bytes: an ``HS256`` token signed with the public key as an HMAC secret (key confusion) or an
``alg: none`` token is refused before any verification. ``iss``, ``aud`` and ``exp`` are required
and checked with the configured leeway. The key is picked by the header's ``kid`` when the key
set names its keys; without a ``kid`` every key that fits the algorithm is tried.

A verified token's principal is cached by the token's SHA-256 until its ``exp`` (LRU, 10,000
entries by default), so a stream of calls with one token verifies its signature once. The cache
is dropped whenever the JWKS file changes, so a removed key stops its tokens at the next check.
Refusals are not cached.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from agentrt.server.auth._principal import Principal
from agentrt.server.auth._reloading import ReloadingFile
from agentrt.server.config import ROLES, JwtConfig
from agentrt.server.core import NotAuthenticated

__all__ = ["JwtVerifier", "parse_jwks"]

log = logging.getLogger("agentrt.auth")

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey | ed448.Ed448PublicKey

_RSA = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
_EC_CURVES: Mapping[str, frozenset[str]] = {
    "secp256r1": frozenset({"ES256"}),
    "secp384r1": frozenset({"ES384"}),
    "secp521r1": frozenset({"ES512", "ES521"}),
    "secp256k1": frozenset({"ES256K"}),
}
KNOWN_ALGORITHMS = _RSA | frozenset().union(*_EC_CURVES.values()) | {"EdDSA"}
_MIN_RSA_BITS = 2048  # shorter RSA keys are factorable: never trusted
_MAX_KEYS_TRIED = 8  # without a kid, at most this many fitting keys are tried
_MAX_CLAIM = 128


@dataclass(frozen=True, slots=True, kw_only=True)
class _Key:
    kid: str | None
    key: PublicKey
    algorithms: frozenset[str]  # the configured algorithms this key can verify


@dataclass(slots=True, kw_only=True)
class _Cached:
    principal: Principal
    expires_at: float
    generation: int


def _fitting(key: PublicKey) -> frozenset[str]:
    if isinstance(key, rsa.RSAPublicKey):
        return _RSA if key.key_size >= _MIN_RSA_BITS else frozenset()
    if isinstance(key, ec.EllipticCurvePublicKey):
        return _EC_CURVES.get(key.curve.name, frozenset())
    return frozenset({"EdDSA"})


def _public(key: object) -> PublicKey | None:
    # A JWK or PEM may hold a private key by mistake: only its public half is ever used.
    if isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        key = key.public_key()
    if isinstance(key, ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey):
        key = key.public_key()
    if isinstance(key, rsa.RSAPublicKey | ec.EllipticCurvePublicKey):
        return key
    if isinstance(key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
        return key
    return None


_FROM_JWK: Mapping[str, Callable[[str | dict[str, Any]], object]] = {
    "RSA": RSAAlgorithm.from_jwk,
    "EC": ECAlgorithm.from_jwk,
    "OKP": OKPAlgorithm.from_jwk,
}


def parse_jwks(data: bytes, *, algorithms: frozenset[str]) -> tuple[_Key, ...]:
    """The usable verification keys of a JSON Web Key Set.

    Entries that cannot verify a configured algorithm (``oct`` keys, ``use: enc``, other curves)
    are skipped with a log line naming their position and ``kid``.

    Raises:
        ValueError: Not a JWKS, or no usable key in it. Messages never hold key material.
    """
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError("not JSON") from None
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise ValueError('not a JSON Web Key Set (no "keys" list)')
    keys: list[_Key] = []
    for number, entry in enumerate(entries, start=1):
        kid = entry.get("kid") if isinstance(entry, dict) else None
        label = f"key {number}" + (f" (kid {kid!r:.80})" if isinstance(kid, str) else "")
        if not isinstance(entry, dict):
            log.warning("JWKS %s is not an object; skipped", label)
            continue
        convert = _FROM_JWK.get(str(entry.get("kty")))
        if convert is None or entry.get("use", "sig") != "sig":
            log.warning("JWKS %s is not an asymmetric signing key; skipped", label)
            continue
        try:
            key = _public(convert(entry))
        except Exception as exc:  # PyJWT's messages may quote the key: name only the kind of failure
            log.warning("JWKS %s does not load (%s); skipped", label, type(exc).__name__)
            continue
        fits = _fitting(key) & algorithms if key is not None else frozenset()
        if isinstance(entry.get("alg"), str):
            fits &= {entry["alg"]}
        if key is None or not fits:
            log.warning(
                "JWKS %s fits none of the accepted algorithms (or is a short RSA key); skipped", label
            )
            continue
        keys.append(_Key(kid=kid if isinstance(kid, str) else None, key=key, algorithms=fits))
    if not keys:
        raise ValueError(f"no key usable with the accepted algorithms {sorted(algorithms)}")
    return tuple(keys)


def _pem_key(number: int, pem: str, algorithms: frozenset[str]) -> _Key:
    data = pem.strip().encode()
    try:
        if b"-----BEGIN CERTIFICATE-----" in data:
            loaded: object = x509.load_pem_x509_certificate(data).public_key()
        else:
            loaded = serialization.load_pem_public_key(data)
    except ValueError:
        raise ValueError(f"public_keys[{number}] is not a PEM public key or certificate") from None
    key = _public(loaded)
    fits = _fitting(key) & algorithms if key is not None else frozenset()
    if key is None or not fits:
        raise ValueError(
            f"public_keys[{number}] fits none of the accepted algorithms {sorted(algorithms)}"
            f" (RSA keys need at least {_MIN_RSA_BITS} bits)"
        )
    return _Key(kid=None, key=key, algorithms=fits)


def _refused(reason: str, message: str, **metadata: str) -> NotAuthenticated:
    return NotAuthenticated(message, reason=reason, metadata={"authenticator": "jwt", **metadata})


def _refusal(exc: jwt.PyJWTError) -> NotAuthenticated:
    # Order matters: several of these subclass DecodeError or InvalidTokenError.
    if isinstance(exc, jwt.ExpiredSignatureError):
        return _refused("TOKEN_EXPIRED", "the bearer token has expired")
    if isinstance(exc, jwt.ImmatureSignatureError):
        return _refused("TOKEN_NOT_YET_VALID", "the bearer token is not valid yet")
    if isinstance(exc, jwt.InvalidAudienceError):
        return _refused("TOKEN_WRONG_AUDIENCE", "the bearer token is for another audience")
    if isinstance(exc, jwt.InvalidIssuerError):
        return _refused("TOKEN_WRONG_ISSUER", "the bearer token is from another issuer")
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return _refused(
            "TOKEN_MISSING_CLAIM", f"the bearer token has no {exc.claim!r} claim", claim=exc.claim
        )
    if isinstance(exc, jwt.InvalidSignatureError):
        return _refused("TOKEN_BAD_SIGNATURE", "the bearer token's signature does not verify")
    if isinstance(exc, jwt.InvalidAlgorithmError):
        return _refused("TOKEN_ALGORITHM_REJECTED", "the bearer token's algorithm is not accepted")
    if isinstance(exc, jwt.DecodeError):
        return _refused("TOKEN_MALFORMED", "the bearer token is not a well-formed JWT")
    return _refused("TOKEN_INVALID", f"the bearer token is invalid ({type(exc).__name__})")


class JwtVerifier:
    """Turns a JWT bearer token into a principal.

    Args:
        config: Keys, algorithms, issuer, audience, leeway and claim names.
        check_interval_s: Least time between two checks of the JWKS file for changes.
        cache_size: Verified tokens remembered until their ``exp`` (0 turns the cache off).
        clock: Monotonic clock for the file checks, seconds.

    Raises:
        ValueError: An unknown algorithm, a JWKS file or inline key that cannot be used (the
            message names it, never key material).
    """

    name = "jwt"

    def __init__(
        self,
        *,
        config: JwtConfig,
        check_interval_s: float = 1.0,
        cache_size: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        unknown = sorted(set(config.algorithms) - KNOWN_ALGORITHMS)
        if unknown:
            raise ValueError(f"jwt: unknown algorithms {unknown}; known: {sorted(KNOWN_ALGORITHMS)}")
        self.config = config
        self._algorithms = frozenset(config.algorithms)
        self._inline = tuple(
            _pem_key(number, pem, self._algorithms) for number, pem in enumerate(config.public_keys)
        )
        algorithms = self._algorithms
        self._jwks = (
            ReloadingFile(
                path=config.jwks_file,
                parse=lambda data: parse_jwks(data, algorithms=algorithms),
                what="JWKS file",
                check_interval_s=check_interval_s,
                clock=clock,
            )
            if config.jwks_file
            else None
        )
        self._cache: OrderedDict[bytes, _Cached] = OrderedDict()
        self._cache_size = cache_size
        # The aio server calls this from its loop only; the lock keeps other callers (threads) safe.
        self._lock = threading.Lock()
        self.verifications = 0
        """Signature verifications done so far (a cached token needs none)."""

    def _keys(self) -> tuple[int, Sequence[_Key]]:
        if self._jwks is None:
            return 0, self._inline
        keys = self._jwks.value
        return self._jwks.generation, self._inline + keys

    def authenticate_token(self, token: str) -> Principal:
        """The principal of a JWT.

        Raises:
            NotAuthenticated: The token is refused; ``reason`` says why (``TOKEN_MALFORMED``,
                ``TOKEN_ALGORITHM_REJECTED``, ``TOKEN_KEY_UNKNOWN``, ``TOKEN_BAD_SIGNATURE``,
                ``TOKEN_EXPIRED``, ``TOKEN_NOT_YET_VALID``, ``TOKEN_WRONG_ISSUER``,
                ``TOKEN_WRONG_AUDIENCE``, ``TOKEN_MISSING_CLAIM``, ``TOKEN_BAD_CLAIM``,
                ``TOKEN_INVALID``). The message never holds the token.
        """
        generation, keys = self._keys()
        digest = hashlib.sha256(token.encode()).digest()
        with self._lock:
            hit = self._cache.get(digest)
            if hit is not None:
                if hit.generation == generation and time.time() < hit.expires_at:
                    self._cache.move_to_end(digest)
                    return hit.principal
                del self._cache[digest]
        claims = self._verify(token, keys)
        principal = self._principal(claims)
        if self._cache_size > 0:
            with self._lock:
                if self._cache and next(iter(self._cache.values())).generation != generation:
                    self._cache.clear()  # keys changed: nothing verified before counts
                self._cache[digest] = _Cached(
                    principal=principal, expires_at=float(claims["exp"]), generation=generation
                )
                if len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return principal

    def _candidates(self, token: str, keys: Sequence[_Key]) -> tuple[str, Sequence[_Key]]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise _refused("TOKEN_MALFORMED", "the bearer token is not a well-formed JWT") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self._algorithms:
            # "none", HS* (an HMAC keyed with our public key) and anything not configured.
            raise _refused(
                "TOKEN_ALGORITHM_REJECTED",
                "the bearer token's algorithm is not accepted; accepted: "
                + ", ".join(sorted(self._algorithms)),
            )
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise _refused("TOKEN_MALFORMED", "the bearer token's kid is not a string")
        fitting = [key for key in keys if alg in key.algorithms]
        if kid is not None:
            named = [key for key in fitting if key.kid == kid]
            # A kid the key set does not name may still be meant for an inline (unnamed) key.
            fitting = named or [key for key in fitting if key.kid is None]
        if not fitting:
            raise _refused("TOKEN_KEY_UNKNOWN", "no configured key can verify the bearer token")
        return alg, fitting[:_MAX_KEYS_TRIED]

    def _verify(self, token: str, keys: Sequence[_Key]) -> dict[str, Any]:
        alg, candidates = self._candidates(token, keys)
        config = self.config
        for candidate in candidates:
            self.verifications += 1
            try:
                return jwt.decode(
                    token,
                    key=candidate.key,
                    algorithms=[alg],
                    audience=config.audience,
                    issuer=config.issuer,
                    leeway=config.leeway_s,
                    options={"require": ["exp", "iss", "aud"]},
                )
            except jwt.InvalidSignatureError:
                continue  # the next fitting key may be the signer
            except jwt.PyJWTError as exc:
                raise _refusal(exc) from None
        raise _refused("TOKEN_BAD_SIGNATURE", "the bearer token's signature does not verify")

    def _principal(self, claims: Mapping[str, Any]) -> Principal:
        config = self.config
        subject = self._name(claims, config.subject_claim)
        tenant = self._name(claims, config.tenant_claim)
        raw = claims.get(config.roles_claim)
        if raw is None:
            names: list[object] = []
        elif isinstance(raw, str):
            names = list(raw.split())
        elif isinstance(raw, list):
            names = list(raw)
        else:
            raise _refused(
                "TOKEN_BAD_CLAIM",
                f"the bearer token's {config.roles_claim!r} claim is not a list or a string",
                claim=config.roles_claim,
            )
        roles = frozenset(name for name in names if isinstance(name, str) and name in ROLES)
        return Principal(subject=subject, tenant=tenant, roles=roles, authenticated_by="jwt")

    @staticmethod
    def _name(claims: Mapping[str, Any], claim: str) -> str:
        value = claims.get(claim)
        if value is None or value == "":
            raise _refused("TOKEN_MISSING_CLAIM", f"the bearer token has no {claim!r} claim", claim=claim)
        if not isinstance(value, str) or len(value) > _MAX_CLAIM or not value.isprintable():
            raise _refused(
                "TOKEN_BAD_CLAIM",
                f"the bearer token's {claim!r} claim is not a printable string "
                f"of at most {_MAX_CLAIM} characters",
                claim=claim,
            )
        return value
