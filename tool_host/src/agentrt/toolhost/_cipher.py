"""Payload encryption at rest (DESIGN R10.2): AES-256-GCM with a key id in every record.

A key file is JSON: ``{"active": "k2", "keys": {"k1": "<base64 of 32 bytes>", "k2": "..."}}``.
New values are sealed with the active key; a value names its key, so records written under an
older key stay readable while that key is in the file. Values written before encryption was
turned on (no prefix) are returned as they are. ``aad`` binds a value to where it belongs (a
table, a column, a row id), so a ciphertext moved to another row does not decrypt.

Sealed form: ``enc:v1:<key id>:<base64url(12-byte nonce || ciphertext+tag)>``.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from agentrt.toolhost._logging import register_secret

__all__ = ["CipherError", "PayloadCipher", "write_key_file"]

PREFIX = "enc:v1:"
_KEY_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_NONCE_BYTES = 12


class CipherError(Exception):
    """A key file is unusable, or a sealed value names an unknown key or does not authenticate."""


class PayloadCipher:
    """Seals and opens text values.

    Args:
        keys: Key id -> 32-byte AES key.
        active: The key id new values are sealed with.

    Raises:
        CipherError: A key is not 32 bytes, a key id is malformed, or ``active`` is not in ``keys``.
    """

    def __init__(self, *, keys: Mapping[str, bytes], active: str) -> None:
        for kid, key in keys.items():
            if not _KEY_ID.match(kid):
                raise CipherError(f"key id {kid[:64]!r} must be 1-64 letters, digits, '_', '.' or '-'")
            if len(key) != 32:
                raise CipherError(f"key {kid!r} is {len(key)} bytes; AES-256 needs 32")
        if active not in keys:
            raise CipherError(f"the active key {active[:64]!r} is not among the keys")
        self._aeads = {kid: AESGCM(key) for kid, key in keys.items()}
        self.active = active

    @classmethod
    def from_file(cls, path: str | Path) -> PayloadCipher:
        """Load a key file (see the module docstring).

        Raises:
            CipherError: The file cannot be read or is malformed; the message never holds key bytes.
        """
        try:
            data = json.loads(Path(path).read_text())
        except OSError as exc:
            raise CipherError(f"cannot read key file {path}: {exc.strerror}") from None
        except ValueError:
            raise CipherError(f"key file {path} is not JSON") from None
        if not isinstance(data, dict) or not isinstance(data.get("keys"), dict) or not data["keys"]:
            raise CipherError(f'key file {path} needs {{"active": ID, "keys": {{ID: BASE64, ...}}}}')
        keys: dict[str, bytes] = {}
        for kid, encoded in data["keys"].items():
            try:
                keys[str(kid)] = base64.b64decode(str(encoded), validate=True)
            except (binascii.Error, ValueError):
                raise CipherError(f"key {str(kid)[:64]!r} in {path} is not base64") from None
            register_secret(str(encoded))  # key material never reaches a log line
        return cls(keys=keys, active=str(data.get("active", "")))

    def seal(self, plaintext: str, *, aad: str) -> str:
        """The sealed form of ``plaintext``, bound to ``aad``."""
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._aeads[self.active].encrypt(nonce, plaintext.encode(), aad.encode())
        return f"{PREFIX}{self.active}:{base64.urlsafe_b64encode(nonce + sealed).decode()}"

    def open(self, value: str, *, aad: str) -> str:
        """The plaintext of a sealed value; a value without the prefix is returned as it is.

        Raises:
            CipherError: Unknown key id, malformed value, or it does not authenticate under ``aad``.
        """
        if not value.startswith(PREFIX):
            return value
        kid, sep, body = value[len(PREFIX) :].partition(":")
        aead = self._aeads.get(kid)
        if not sep or aead is None:
            raise CipherError(f"sealed with unknown key {kid[:64]!r}")
        try:
            raw = base64.urlsafe_b64decode(body)
            return aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], aad.encode()).decode()
        except (binascii.Error, ValueError, InvalidTag):
            raise CipherError(f"a value sealed with key {kid!r} does not authenticate") from None


def write_key_file(path: Path, *, keys: Mapping[str, bytes] | None = None, active: str = "k1") -> None:
    """Write a key file readable by its owner only (new random key ``active`` when ``keys`` is None)."""
    keys = keys if keys is not None else {active: AESGCM.generate_key(bit_length=256)}
    text = json.dumps({"active": active, "keys": {k: base64.b64encode(v).decode() for k, v in keys.items()}})
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
