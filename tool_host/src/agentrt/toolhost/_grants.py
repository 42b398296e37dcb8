"""Call grants (DESIGN R3.3): the runtime's signed permission for one tool host call.

A grant is a compact JWT (RFC 7519, JWS compact form) signed with Ed25519 (``alg: EdDSA``), so
any JWT library can read one; it is framed here by hand with ``cryptography`` doing the signing,
because a library's generic checks cost as much as the signature on every tool call. Its
header names the key id,
derived from the public key, so keys rotate by adding the new public key to the hosts'
trusted set before the runtime signs with it. The claims bind everything the host acts on:

==========  =========================================================
``ten``     tenant of the run; the host scopes its ledger by it
``run``     run id
``call``    call id within the run
``key``     idempotency key
``fen``     fencing token (the run's lease generation)
``tool``    tool name
``ahash``   sha256 (hex) of the exact ``arguments_json`` text sent
``iat``     issued at, epoch seconds
``exp``     expiry, epoch seconds
``aud``     always ``agentrt-toolhost``
``ses``     session id of the run (optional; scopes session-wide intent keys)
``ovr``     true when a person approved running the call over an earlier call's intent (optional)
==========  =========================================================

A host verifies signature, expiry, lifetime and every binding before any ledger write or plugin
code. It takes no grant that lives (``exp - iat``) longer than its cap, by default
:data:`DEFAULT_MAX_GRANT_LIFETIME_S`, the longest ``ttl_s`` the runtime signs with: a grant is
checked when a call arrives, not while it runs, so long tool timeouts never need long grants.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

__all__ = [
    "AUDIENCE",
    "DEFAULT_MAX_GRANT_LIFETIME_S",
    "GRANT_HEADER",
    "MAX_FENCING_TOKEN",
    "CallGrant",
    "GrantError",
    "GrantSigner",
    "GrantVerifier",
    "arguments_hash",
    "key_id",
    "public_key_pem",
    "write_signing_key",
]

GRANT_HEADER = "x-agentrt-call-grant"
AUDIENCE = "agentrt-toolhost"
MAX_FENCING_TOKEN = 2**63 - 1  # fencing tokens are BIGINT lease generations
DEFAULT_MAX_GRANT_LIFETIME_S = 3600.0
"""The longest grant lifetime a host accepts unless told otherwise, and the runtime's ``grants.ttl_s`` cap."""
_MAX_GRANT_BYTES = 4096
_ALGORITHM = "EdDSA"
_RELOAD_CHECK_S = 1.0
_REQUIRED = ("exp", "iat", "aud", "ten", "run", "call", "key", "fen", "tool", "ahash")
_URLSAFE = str.maketrans("-_", "+/")


def _b64encode(data: str | bytes) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _b64decode(text: str) -> bytes:
    # Strict: a character outside the base64url alphabet is an error, never silently dropped.
    return base64.b64decode(text.translate(_URLSAFE) + "=" * (-len(text) % 4), validate=True)


class GrantError(Exception):
    """A grant is missing, malformed, unsigned by a trusted key, expired, or does not match the call.

    Args:
        message: What is wrong, never echoing the grant itself.
        reason: Stable reason: ``GRANT_REQUIRED``, ``GRANT_INVALID``, ``GRANT_EXPIRED``,
            ``GRANT_TOO_LONG`` (it lives longer than the host's cap), ``GRANT_UNKNOWN_KEY`` or
            ``GRANT_MISMATCH``.
    """

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


@dataclasses.dataclass(frozen=True, kw_only=True)
class CallGrant:
    """The bindings of one grant."""

    tenant: str
    run_id: str
    call_id: str
    idempotency_key: str
    fencing_token: int
    tool: str
    args_hash: str
    expires_at: int  # epoch seconds
    session_id: str = ""
    intent_override: bool = False


def arguments_hash(arguments_json: str) -> str:
    """sha256 (hex) of the exact arguments text a call carries."""
    return hashlib.sha256(arguments_json.encode()).hexdigest()


def key_id(public_key: Ed25519PublicKey) -> str:
    """Stable id of a public key: the first 16 hex digits of the sha256 of its raw bytes."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def public_key_pem(private_key: Ed25519PrivateKey) -> bytes:
    """The PEM public key hosts need to trust grants signed with ``private_key``."""
    return private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def write_signing_key(path: Path, private_key: Ed25519PrivateKey | None = None) -> Ed25519PrivateKey:
    """Write a (new) Ed25519 signing key as PEM, readable by its owner only; returns it."""
    key = private_key or Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    os.replace(tmp, path)  # readers see the old key or the new one, never half a file
    return key


class _WatchedFile:
    """Re-parse a file when its modification time or size changes, at most once a second."""

    def __init__(self, path: Path, parse: Callable[[bytes], Any], clock: Callable[[], float]) -> None:
        self._path = path
        self._parse = parse
        self._clock = clock
        self._lock = threading.Lock()
        self._stamp = self._stat()
        self.value = parse(self._read())
        self._checked = clock()

    def _stat(self) -> tuple[int, int]:
        info = os.stat(self._path)
        return info.st_mtime_ns, info.st_size

    def _read(self) -> bytes:
        return self._path.read_bytes()

    def current(self) -> Any:
        now = self._clock()
        if now - self._checked < _RELOAD_CHECK_S:
            return self.value
        with self._lock:
            self._checked = now
            try:
                stamp = self._stat()
                if stamp != self._stamp:
                    self.value = self._parse(self._read())
                    self._stamp = stamp
            except (OSError, ValueError):
                pass  # mid-rotation or gone: keep the last good value
        return self.value


def _load_private(data: bytes) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(data, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("the grant signing key must be an Ed25519 private key")
    return key


def _load_public_keys(data: bytes) -> dict[str, Ed25519PublicKey]:
    keys: dict[str, Ed25519PublicKey] = {}
    marker = b"-----BEGIN PUBLIC KEY-----"
    for block in data.split(marker)[1:]:
        key = serialization.load_pem_public_key(marker + block)
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError("grant keys must be Ed25519 public keys")
        keys[key_id(key)] = key
    if not keys:
        raise ValueError("no PEM public key found")
    return keys


def _lifetime(ttl_s: float) -> int:
    return max(1, round(ttl_s))


class GrantSigner:
    """Signs grants with an Ed25519 key; a key file is re-read when it changes (rotation).

    Args:
        key: A private key (e.g. one made at start for spawned hosts), or
        key_file: A PEM Ed25519 private key file.
        ttl_s: Seconds a grant is valid.
        clock: Epoch seconds (tests pass their own).

    Raises:
        ValueError: The file is not an Ed25519 private key.
        OSError: The file cannot be read.
    """

    def __init__(
        self,
        *,
        key: Ed25519PrivateKey | None = None,
        key_file: str | Path = "",
        ttl_s: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if (key is None) == (not key_file):
            raise ValueError("give exactly one of key or key_file")
        self._ttl = ttl_s
        self._clock = clock
        self._file = _WatchedFile(Path(key_file), _load_private, clock) if key_file else None
        self._key = key
        self._kid_cache: tuple[Ed25519PrivateKey, str] | None = None

    def _current(self) -> tuple[Ed25519PrivateKey, str]:
        key = self._file.current() if self._file is not None else self._key
        assert isinstance(key, Ed25519PrivateKey)
        cached = self._kid_cache
        if cached is None or cached[0] is not key:
            cached = (key, key_id(key.public_key()))
            self._kid_cache = cached
        return cached

    @property
    def public_key_pem(self) -> bytes:
        """PEM of the current public key."""
        return public_key_pem(self._current()[0])

    @property
    def lifetime_s(self) -> int:
        """Seconds from ``iat`` to ``exp`` of the grants signed with the default ``ttl_s``."""
        return _lifetime(self._ttl)

    def sign(
        self,
        *,
        tenant: str,
        run_id: str,
        call_id: str,
        idempotency_key: str,
        fencing_token: int,
        tool: str,
        arguments_json: str,
        ttl_s: float | None = None,
        session_id: str = "",
        intent_override: bool = False,
    ) -> str:
        """A grant for one call, valid ``ttl_s`` (default: the signer's) from now.

        ``session_id`` and ``intent_override`` are claimed only when set, so a grant without them
        is the same as before they existed.
        """
        key, kid = self._current()
        now = int(self._clock())
        claims = {
            "ten": tenant,
            "run": run_id,
            "call": call_id,
            "key": idempotency_key,
            "fen": fencing_token,
            "tool": tool,
            "ahash": arguments_hash(arguments_json),
            "iat": now,
            "exp": now + _lifetime(self._ttl if ttl_s is None else ttl_s),
            "aud": AUDIENCE,
        }
        if session_id:
            claims["ses"] = session_id
        if intent_override:
            claims["ovr"] = True
        header = _b64encode(json.dumps({"alg": _ALGORITHM, "kid": kid, "typ": "JWT"}, separators=(",", ":")))
        body = _b64encode(json.dumps(claims, separators=(",", ":")))
        signing_input = f"{header}.{body}"
        return f"{signing_input}.{_b64encode(key.sign(signing_input.encode()))}"


class GrantVerifier:
    """Verifies grants against trusted public keys, read from a PEM file re-read when it changes.

    Args:
        keys_file: One or more PEM Ed25519 public keys, concatenated.
        leeway_s: Clock skew allowed on ``exp`` and ``iat``.
        max_lifetime_s: The longest ``exp - iat`` taken; a grant living longer is refused
            (``GRANT_TOO_LONG``), so a leaked one cannot be replayed for long.
        clock: Epoch seconds (expiry; when to look at the file again).

    Raises:
        ValueError: The file holds no Ed25519 public key, or ``max_lifetime_s`` is not a positive
            finite number.
        OSError: The file cannot be read.
    """

    def __init__(
        self,
        *,
        keys_file: str | Path,
        leeway_s: float = 5.0,
        max_lifetime_s: float = DEFAULT_MAX_GRANT_LIFETIME_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not 0 < max_lifetime_s < math.inf:
            raise ValueError(f"the longest grant lifetime must be positive and finite, not {max_lifetime_s}")
        self._keys = _WatchedFile(Path(keys_file), _load_public_keys, clock)
        self._leeway = leeway_s
        self._max_lifetime = max_lifetime_s
        self._clock = clock

    def verify(self, token: str) -> CallGrant:
        """The grant's bindings once its signature and expiry hold.

        Raises:
            GrantError: Anything wrong with it; the caller compares the bindings with the call.
        """
        if not token:
            raise GrantError("a call grant signed by the runtime is required", reason="GRANT_REQUIRED")
        if len(token) > _MAX_GRANT_BYTES:
            raise GrantError("the call grant is too large", reason="GRANT_INVALID")
        parts = token.split(".")
        if len(parts) != 3:
            raise GrantError("the call grant is malformed", reason="GRANT_INVALID")
        try:
            header = json.loads(_b64decode(parts[0]))
            signature = _b64decode(parts[2])
        except (ValueError, RecursionError):  # RecursionError: hostile nesting in the header
            raise GrantError("the call grant is malformed", reason="GRANT_INVALID") from None
        keys: dict[str, Ed25519PublicKey] = self._keys.current()
        key = keys.get(str(header.get("kid", ""))) if isinstance(header, dict) else None
        if key is None or header.get("alg") != _ALGORITHM:
            raise GrantError("the call grant is not signed by a trusted key", reason="GRANT_UNKNOWN_KEY")
        try:
            key.verify(signature, f"{parts[0]}.{parts[1]}".encode())
        except InvalidSignature:
            raise GrantError("the call grant does not verify", reason="GRANT_INVALID") from None
        try:
            claims = json.loads(_b64decode(parts[1]))
        except (ValueError, RecursionError):
            raise GrantError("the call grant is malformed", reason="GRANT_INVALID") from None
        if not isinstance(claims, dict) or any(name not in claims for name in _REQUIRED):
            raise GrantError("the call grant lacks a binding", reason="GRANT_INVALID")
        now = self._clock()
        expires, issued = claims["exp"], claims["iat"]
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in (expires, issued)):
            raise GrantError("the call grant's times are malformed", reason="GRANT_INVALID")
        if claims["aud"] != AUDIENCE or issued > now + self._leeway:
            raise GrantError("the call grant is not for a tool host now", reason="GRANT_INVALID")
        if expires - issued > self._max_lifetime:
            raise GrantError(
                f"the call grant lives longer than the {self._max_lifetime:g} s this host accepts",
                reason="GRANT_TOO_LONG",
            )
        if expires <= now - self._leeway:
            raise GrantError("the call grant expired", reason="GRANT_EXPIRED")
        fencing = claims["fen"]
        if not isinstance(fencing, int) or isinstance(fencing, bool) or not 0 <= fencing <= MAX_FENCING_TOKEN:
            raise GrantError("the call grant's fencing token is out of range", reason="GRANT_INVALID")
        strings = ("ten", "run", "call", "key", "tool", "ahash")
        if not all(isinstance(claims[name], str) for name in strings):
            raise GrantError("the call grant's bindings are malformed", reason="GRANT_INVALID")
        session_id, override = claims.get("ses", ""), claims.get("ovr", False)
        if not isinstance(session_id, str) or not isinstance(override, bool):
            raise GrantError("the call grant's bindings are malformed", reason="GRANT_INVALID")
        return CallGrant(
            tenant=claims["ten"],
            run_id=claims["run"],
            call_id=claims["call"],
            idempotency_key=claims["key"],
            fencing_token=fencing,
            tool=claims["tool"],
            args_hash=claims["ahash"],
            expires_at=int(claims["exp"]),
            session_id=session_id,
            intent_override=override,
        )
