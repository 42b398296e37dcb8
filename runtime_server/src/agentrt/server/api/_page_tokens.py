"""ListRuns pages: what fits in one reply, and page tokens (opaque to callers, tamper-evident,
bound to the tenant and filters).

A page holds at most ``page_size`` runs and at most what fits in one reply (:class:`RunPage`):
runs carry caller-sized fields (input, metadata, variables), so 500 runs of 16 KB of metadata
each are 8 MB, twice what gRPC sends. Such a page ends early, with a token after its last run.

A token is ``base64url(cursor) "." base64url(HMAC-SHA256(key, cursor, scope)[:16])``, where the
scope (tenant, phases, agent, session) is covered by the MAC but not carried, so a token only
opens the listing it came from. The cursor itself is the store's keyset position, which the
store range-checks again when it decodes it.

The key must be the same on every replica behind one database, so a per-process random key
would break paging across replicas. It is derived (HKDF-SHA256) from configured material every
replica shares: the encryption key file and the grant signing key file when configured, and
always the database URL. Without configured key files the MAC still rejects altered or
invented tokens from anyone who does not know the deployment's database URL; and since the
scope holds the tenant, a forged token could at most page through the caller's own runs.
Rotating a key file makes outstanding tokens invalid: the caller restarts its listing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable, Sequence
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from agentrt.proto.runtime.v1 import run_pb2
from agentrt.server.config import Settings
from agentrt.server.core import InvalidRequest
from agentrt.server.store import RunRecord

__all__ = ["MAX_PAGE_TOKEN_CHARS", "MAX_REPLY_BYTES", "PageTokens", "RunPage"]

MAX_PAGE_TOKEN_CHARS = 1024
#: The largest reply the server sends: its ``grpc.max_send_message_length`` (``_server``; a test
#: keeps the two equal).
MAX_REPLY_BYTES = 4 * 1024 * 1024
# What a ListRuns reply holds besides its runs: the next page token (a sealed cursor, far below
# MAX_PAGE_TOKEN_CHARS) and its field's framing.
_REPLY_RESERVE_BYTES = 2 * MAX_PAGE_TOKEN_CHARS
_MAC_BYTES = 16
_MAX_KEY_FILE_BYTES = 64 * 1024


def _invalid() -> InvalidRequest:
    return InvalidRequest(
        "page_token is not a token this server issued for this listing; start again without it",
        field="page_token",
        reason="INVALID_PAGE_TOKEN",
    )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _file_bytes(path: str) -> bytes:
    if not path:
        return b""
    try:
        with Path(path).open("rb") as handle:
            return handle.read(_MAX_KEY_FILE_BYTES)
    except OSError:
        return b""  # the server's start checks these files and reports on them


class PageTokens:
    """Seals and opens page tokens with one key."""

    def __init__(self, *, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("a page token key needs at least 16 bytes")
        self._key = key

    @classmethod
    def for_settings(cls, settings: Settings) -> PageTokens:
        """The key every replica with this configuration derives (see the module docstring)."""
        material = b"\0".join(
            [
                settings.db_url.encode(),
                _file_bytes(settings.encryption.key_file),
                _file_bytes(settings.grants.signing_key_file),
            ]
        )
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"agentrt page tokens v1").derive(
            material
        )
        return cls(key=key)

    def _mac(self, cursor: bytes, scope: Sequence[str]) -> bytes:
        digest = hashlib.sha256("\0".join(scope).encode()).digest()
        return hmac.new(self._key, cursor + b"\0" + digest, hashlib.sha256).digest()[:_MAC_BYTES]

    def seal(self, cursor: str, *, scope: Sequence[str]) -> str:
        """The token a caller gets for the store's ``cursor`` in the listing ``scope``."""
        raw = cursor.encode()
        return f"{_b64(raw)}.{_b64(self._mac(raw, scope))}"

    def open(self, token: str, *, scope: Sequence[str]) -> str:
        """The cursor sealed in ``token``.

        Raises:
            InvalidRequest: the token is too long, malformed, altered, or from another listing
                (another tenant or other filters); the message never quotes it.
        """
        if len(token) > MAX_PAGE_TOKEN_CHARS:
            raise _invalid()
        body, dot, mac = token.partition(".")
        if not dot:
            raise _invalid()
        try:
            raw, sent = _unb64(body), _unb64(mac)
        except (binascii.Error, ValueError):
            raise _invalid() from None
        if _b64(raw) != body or _b64(sent) != mac:
            raise _invalid()  # another spelling of the same bytes (base64's spare bits)
        if not hmac.compare_digest(sent, self._mac(raw, scope)):
            raise _invalid()
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise _invalid() from None


def _framed(size: int) -> int:
    """Bytes of a ``repeated Run runs = 1`` entry of ``size`` bytes: a tag, a varint length, the run."""
    return 1 + max(1, (size.bit_length() + 6) // 7) + size


class RunPage:
    """The runs of one ListRuns reply, converted as they are added and kept within its size.

    Args:
        convert: A stored run as the API shows it.
        max_bytes: The runs' share of the reply; by default the reply limit less room for the token.
    """

    def __init__(
        self,
        *,
        convert: Callable[[RunRecord], run_pb2.Run],
        max_bytes: int = MAX_REPLY_BYTES - _REPLY_RESERVE_BYTES,
    ) -> None:
        self._convert = convert
        self._max_bytes = max_bytes
        self.runs: list[run_pb2.Run] = []
        self.size = 0  # serialised bytes of the runs so far, framing included

    def add(self, record: RunRecord) -> bool:
        """Add the run if it fits (the first always does: a page moves the listing on); else False."""
        run = self._convert(record)
        size = _framed(run.ByteSize())
        if self.runs and self.size + size > self._max_bytes:
            return False
        self.runs.append(run)
        self.size += size
        return True
