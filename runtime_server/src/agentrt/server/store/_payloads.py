"""Payloads: large values stored once outside the events (DESIGN R8.4).

A tool result, model text, input or output larger than ``payloads.inline_max_bytes`` is kept
here, and the event carries a :class:`PayloadRef` (size, sha256, a short preview) instead of the
value. The id is the value's SHA-256, so storing the same value twice in a run stores it once.

Two places for the bytes:

- ``db`` (the default): the ``content`` column of ``run_payloads``.
- ``file``: ``<root>/<run_id>/<payload_id>``, written to a temporary file and renamed. The path is
  built only from ids checked against strict patterns, never from a stored location or a caller.

With the store's cipher the bytes are sealed at rest, bound to the run and payload id, as events are.
Reads stream in chunks; a value in clear is read chunk by chunk from its column or file.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Connection, delete, func, insert, select

from agentrt.server.core import InvalidRequest, PayloadRef
from agentrt.server.store._crypt import RecordCipher, UnreadableRecord
from agentrt.server.store._db import Database
from agentrt.server.store._schema import payloads

__all__ = [
    "JSON",
    "PREVIEW_CHARS",
    "TEXT",
    "PayloadRef",
    "PayloadStore",
    "StoredPayload",
    "check_payload_id",
    "preview_of",
]

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
PREVIEW_CHARS = 200
_PAYLOAD_ID = re.compile(r"[0-9a-f]{64}")
# Run ids are hex today; the pattern only has to keep a path component a plain name.
_RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,40}")
_KINDS = frozenset({"input", "output", "model_text", "tool_arguments", "tool_result"})


def check_payload_id(run_id: str, payload_id: str) -> None:
    """Refuse ids that are malformed before any lookup (the message never echoes them).

    Raises:
        InvalidRequest: ``run_id`` or ``payload_id`` is empty or does not match its pattern.
    """
    if not run_id or not _RUN_ID.fullmatch(run_id):
        raise InvalidRequest("run_id must be 1 to 40 letters, digits, '_' or '-'", field="run_id")
    if not _PAYLOAD_ID.fullmatch(payload_id):
        raise InvalidRequest("payload_id must be 64 lowercase hex digits", field="payload_id")


def preview_of(text: str) -> str:
    """The start of a value, at most PREVIEW_CHARS characters."""
    return text[:PREVIEW_CHARS]


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredPayload:
    """A payload's row without its bytes."""

    run_id: str
    tenant_id: str
    kind: str
    location: str
    ref: PayloadRef


class PayloadStore:
    """Puts and reads payloads of runs.

    Args:
        db: The run store's database.
        crypt: The run store's cipher wrapper (seals nothing when encryption is off).
        mode: ``db`` or ``file``.
        root: Directory of the file store (``data_dir/payloads``); required for ``file``.
    """

    def __init__(
        self,
        *,
        db: Database,
        crypt: RecordCipher,
        mode: Literal["db", "file"] = "db",
        root: Path | None = None,
    ) -> None:
        if mode == "file" and root is None:
            raise ValueError("the file payload store needs a root directory")
        self._db = db
        self._crypt = crypt
        self.mode = mode
        self.root = root

    # -- writing ------------------------------------------------------------------------------------

    async def put(
        self, *, run_id: str, tenant_id: str, kind: str, media_type: str, text: str, now_ms: int
    ) -> PayloadRef:
        """Store ``text`` (UTF-8) once for the run and return its reference.

        Storing a value the run already has is a no-op that returns the same reference.
        """
        if kind not in _KINDS:
            raise ValueError(f"unknown payload kind {kind!r}")
        data = text.encode()
        digest = hashlib.sha256(data).hexdigest()
        check_payload_id(run_id, digest)
        ref = PayloadRef(
            payload_id=digest,
            size_bytes=len(data),
            sha256=digest,
            preview=preview_of(text),
            media_type=media_type,
        )
        cipher = self._crypt.cipher
        body = data if cipher is None else cipher.seal(text, aad=_aad(run_id, digest)).encode()
        del data  # one copy of a large value at a time
        location = "db"
        if self.mode == "file":
            location = f"file:{run_id}/{digest}"
            await asyncio.to_thread(self._write_file, run_id, digest, body)
            content: bytes | None = None
        else:
            content = body
        row = {
            "run_id": run_id,
            "payload_id": digest,
            "tenant_id": tenant_id,
            "kind": kind,
            "media_type": media_type,
            "size_bytes": ref.size_bytes,
            "sha256": digest,
            "location": location,
            "content": content,
            "created_ms": now_ms,
        }

        def write(conn: Connection) -> None:
            known = conn.execute(
                select(payloads.c.payload_id).where(
                    payloads.c.run_id == run_id, payloads.c.payload_id == digest
                )
            ).first()
            if known is None:
                conn.execute(insert(payloads).values(**row))

        await self._db.transaction(write)
        return ref

    def _path(self, run_id: str, payload_id: str) -> Path:
        check_payload_id(run_id, payload_id)
        assert self.root is not None
        return self.root / run_id / payload_id

    def _write_file(self, run_id: str, payload_id: str, body: bytes) -> None:
        path = self._path(run_id, payload_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write aside, flush to disk, then rename: a reader never sees half a payload.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(body)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    async def delete_run(self, run_id: str) -> int:
        """Remove every payload of a run (retention), rows and files; returns how many rows went."""
        check_payload_id(run_id, "0" * 64)

        def write(conn: Connection) -> int:
            return int(conn.execute(delete(payloads).where(payloads.c.run_id == run_id)).rowcount or 0)

        removed = await self._db.transaction(write)
        if self.root is not None:
            await asyncio.to_thread(shutil.rmtree, self.root / run_id, True)
        return removed

    # -- reading ------------------------------------------------------------------------------------

    async def find(self, *, run_id: str, payload_id: str, tenant_id: str) -> StoredPayload | None:
        """The payload's row, or None when the run has no such payload or is another tenant's.

        Raises:
            InvalidRequest: A malformed id.
        """
        check_payload_id(run_id, payload_id)
        cols = [c for c in payloads.c if c.name != "content"]

        def read(conn: Connection) -> Any:
            return conn.execute(
                select(*cols).where(
                    payloads.c.run_id == run_id,
                    payloads.c.payload_id == payload_id,
                    payloads.c.tenant_id == tenant_id,
                )
            ).first()

        row = await self._db.transaction(read)
        if row is None:
            return None
        ref = PayloadRef(
            payload_id=row.payload_id,
            size_bytes=int(row.size_bytes),
            sha256=row.sha256,
            preview="",
            media_type=row.media_type,
        )
        return StoredPayload(
            run_id=row.run_id, tenant_id=row.tenant_id, kind=row.kind, location=row.location, ref=ref
        )

    async def chunks(self, stored: StoredPayload, *, chunk_bytes: int) -> AsyncIterator[bytes]:
        """The payload's bytes in chunks of ``chunk_bytes`` (the last may be shorter).

        Raises:
            UnreadableRecord: The bytes are missing, sealed with an unknown key, or do not match
                the recorded hash.
        """
        sealed = self._crypt.cipher is not None
        if stored.location == "db":
            if sealed:
                body = await self._db_whole(stored)
                async for part in _split(self._open(stored, body), chunk_bytes):
                    yield part
                return
            async for part in self._db_chunks(stored, chunk_bytes):
                yield part
            return
        if stored.location != f"file:{stored.run_id}/{stored.ref.payload_id}":
            raise _unreadable(stored, "has an unexpected location")
        if self.root is None:
            raise _unreadable(stored, "is in the file store, which is not configured")
        path = self._path(stored.run_id, stored.ref.payload_id)
        if sealed:
            body = await asyncio.to_thread(_read_file, path, stored)
            async for part in _split(self._open(stored, body), chunk_bytes):
                yield part
            return
        offset = 0
        while offset < stored.ref.size_bytes:
            part = await asyncio.to_thread(_read_range, path, offset, chunk_bytes, stored)
            if not part:
                raise _unreadable(stored, "is shorter than recorded")
            offset += len(part)
            yield part

    async def _db_whole(self, stored: StoredPayload) -> bytes:
        def read(conn: Connection) -> Any:
            return conn.execute(
                select(payloads.c.content).where(
                    payloads.c.run_id == stored.run_id, payloads.c.payload_id == stored.ref.payload_id
                )
            ).scalar()

        content = await self._db.transaction(read)
        if content is None:
            raise _unreadable(stored, "has no content")
        return bytes(content)

    async def _db_chunks(self, stored: StoredPayload, chunk_bytes: int) -> AsyncIterator[bytes]:
        offset = 0
        while offset < stored.ref.size_bytes:

            def read(conn: Connection, start: int = offset) -> Any:
                # substr is 1-based on SQLite blobs and PostgreSQL bytea alike.
                return conn.execute(
                    select(func.substr(payloads.c.content, start + 1, chunk_bytes)).where(
                        payloads.c.run_id == stored.run_id, payloads.c.payload_id == stored.ref.payload_id
                    )
                ).scalar()

            part = await self._db.transaction(read)
            if not part:
                raise _unreadable(stored, "is shorter than recorded")
            offset += len(part)
            yield bytes(part)

    def _open(self, stored: StoredPayload, body: bytes) -> bytes:
        cipher = self._crypt.cipher
        assert cipher is not None
        try:
            data = cipher.open(body.decode(), aad=_aad(stored.run_id, stored.ref.payload_id)).encode()
        except Exception as exc:  # CipherError, or bytes that are not a sealed text at all
            raise _unreadable(stored, f"cannot be opened: {type(exc).__name__}") from None
        if hashlib.sha256(data).hexdigest() != stored.ref.sha256:
            raise _unreadable(stored, "does not match its recorded hash")
        return data


def _aad(run_id: str, payload_id: str) -> str:
    return f"run_payloads.content:{run_id}:{payload_id}"


def _unreadable(stored: StoredPayload, why: str) -> UnreadableRecord:
    return UnreadableRecord(
        f"run {stored.run_id}: payload {stored.ref.payload_id} {why}",
        metadata={"run_id": stored.run_id, "payload_id": stored.ref.payload_id},
    )


def _read_file(path: Path, stored: StoredPayload) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        raise _unreadable(stored, "is missing from the file store") from None


def _read_range(path: Path, offset: int, size: int, stored: StoredPayload) -> bytes:
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            return fh.read(size)
    except OSError:
        raise _unreadable(stored, "is missing from the file store") from None


async def _split(data: bytes, chunk_bytes: int) -> AsyncIterator[bytes]:
    view = memoryview(data)
    for start in range(0, len(data), chunk_bytes):
        yield bytes(view[start : start + chunk_bytes])
