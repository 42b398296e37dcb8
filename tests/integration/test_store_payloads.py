"""The payload store (R8.4) on SQLite and PostgreSQL, in the database and in files, clear and sealed.

A value goes in once and comes back byte-identical in chunks of any size; storing it twice stores
it once; ids are checked before any lookup and never become paths unchecked; another tenant's
payload is not found; a missing, tampered or wrongly keyed payload fails alone with a clear error.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from agentrt.server.core import InvalidRequest
from agentrt.server.store import PayloadStore, Store, UnreadableRecord, check_payload_id, load_cipher
from agentrt.server.store._schema import payloads
from agentrt.toolhost.security import write_key_file

RUN = "0190a0b0c0d0e0f000112233445566"
TEXT = "".join(chr(0x20 + i % 90) for i in range(300_000)) + "é✓𝄞"  # multi-byte at the end
DATA = TEXT.encode()


@pytest.fixture(params=["clear", "sealed"])
async def store(request: pytest.FixtureRequest, db_url: str, tmp_path: Path) -> AsyncIterator[Store]:
    cipher = None
    if request.param == "sealed":
        write_key_file(tmp_path / "keys.json", keys={"k1": bytes(range(32))}, active="k1")
        cipher = load_cipher(str(tmp_path / "keys.json"))
    opened = await Store.open(db_url, cipher=cipher)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture(params=["db", "file"])
def payload_store(request: pytest.FixtureRequest, store: Store, tmp_path: Path) -> PayloadStore:
    return store.payload_store(mode=request.param, root=tmp_path / "payloads")


async def read_all(ps: PayloadStore, *, tenant: str = "t1", chunk_bytes: int = 65536) -> bytes:
    stored = await ps.find(run_id=RUN, payload_id=hashlib.sha256(DATA).hexdigest(), tenant_id=tenant)
    assert stored is not None
    parts = [p async for p in ps.chunks(stored, chunk_bytes=chunk_bytes)]
    assert all(len(p) == chunk_bytes for p in parts[:-1]) and 0 < len(parts[-1]) <= chunk_bytes
    return b"".join(parts)


async def put(ps: PayloadStore, *, tenant: str = "t1") -> str:
    ref = await ps.put(
        run_id=RUN, tenant_id=tenant, kind="tool_result", media_type="application/json", text=TEXT, now_ms=5
    )
    return ref.payload_id


async def test_a_payload_reads_back_byte_identical_in_chunks_and_is_stored_once(
    payload_store: PayloadStore, store: Store, tmp_path: Path
) -> None:
    ref = await payload_store.put(
        run_id=RUN, tenant_id="t1", kind="tool_result", media_type="application/json", text=TEXT, now_ms=5
    )
    assert ref.payload_id == ref.sha256 == hashlib.sha256(DATA).hexdigest()
    assert ref.size_bytes == len(DATA) and ref.preview == TEXT[:200]
    for chunk_bytes in (1024, 65536, 7 * 1024 * 1024):
        assert await read_all(payload_store, chunk_bytes=chunk_bytes) == DATA
    again = await payload_store.put(
        run_id=RUN, tenant_id="t1", kind="tool_result", media_type="application/json", text=TEXT, now_ms=9
    )
    assert again == ref
    count = await store.db.transaction(
        lambda c: c.execute(select(func.count()).select_from(payloads)).scalar()
    )
    assert count == 1
    if payload_store.mode == "file":
        files = [p for p in (tmp_path / "payloads").rglob("*") if p.is_file()]
        assert [p.relative_to(tmp_path / "payloads").as_posix() for p in files] == [f"{RUN}/{ref.payload_id}"]
        on_disk = files[0].read_bytes()
        # Sealed at rest when the store has a cipher; the bytes as they are otherwise.
        assert (on_disk == DATA) == (store._crypt.cipher is None)
    else:
        content = await store.db.transaction(lambda c: c.execute(select(payloads.c.content)).scalar())
        assert (bytes(content) == DATA) == (store._crypt.cipher is None)
        assert b"\xf0\x9d\x84\x9e" not in bytes(content) or store._crypt.cipher is None


async def test_an_empty_payload_and_another_tenant(payload_store: PayloadStore) -> None:
    ref = await payload_store.put(
        run_id=RUN, tenant_id="t1", kind="output", media_type="text/plain", text="", now_ms=1
    )
    stored = await payload_store.find(run_id=RUN, payload_id=ref.payload_id, tenant_id="t1")
    assert stored is not None and [p async for p in payload_store.chunks(stored, chunk_bytes=1024)] == []
    await put(payload_store)
    # Another tenant's payload is not found, like a missing one.
    assert (
        await payload_store.find(run_id=RUN, payload_id=hashlib.sha256(DATA).hexdigest(), tenant_id="t2")
        is None
    )
    assert await payload_store.find(run_id=RUN, payload_id="0" * 64, tenant_id="t1") is None


@pytest.mark.parametrize(
    ("run_id", "payload_id", "field"),
    [
        ("", "0" * 64, "run_id"),
        ("../etc", "0" * 64, "run_id"),
        ("a/b", "0" * 64, "run_id"),
        ("r" * 41, "0" * 64, "run_id"),
        ("r\x00", "0" * 64, "run_id"),
        (RUN, "", "payload_id"),
        (RUN, "A" * 64, "payload_id"),
        (RUN, "0" * 63, "payload_id"),
        (RUN, "0" * 65, "payload_id"),
        (RUN, "../" + "0" * 61, "payload_id"),
        (RUN, "0" * 63 + "\n", "payload_id"),
    ],
)
async def test_malformed_ids_are_refused_before_any_lookup(
    sqlite_url: str, tmp_path: Path, run_id: str, payload_id: str, field: str
) -> None:
    store = await Store.open(sqlite_url)
    try:
        for ps in (store.payload_store(), store.payload_store(mode="file", root=tmp_path / "payloads")):
            with pytest.raises(InvalidRequest) as caught:
                await ps.find(run_id=run_id, payload_id=payload_id, tenant_id="t1")
            assert caught.value.field == field
            echoed = [v for v in (run_id, payload_id) if len(v) > 2 and v in caught.value.message]
            assert echoed == []
            if field == "run_id":  # put derives the payload id from the content
                with pytest.raises(InvalidRequest):
                    await ps.put(
                        run_id=run_id,
                        tenant_id="t1",
                        kind="output",
                        media_type="text/plain",
                        text="x",
                        now_ms=1,
                    )
        with pytest.raises(InvalidRequest):
            check_payload_id(run_id, payload_id)
    finally:
        await store.close()
    assert not (tmp_path / "payloads").exists() or not any((tmp_path / "payloads").rglob("*"))


async def test_an_unknown_kind_is_refused(payload_store: PayloadStore) -> None:
    with pytest.raises(ValueError, match="unknown payload kind"):
        await payload_store.put(
            run_id=RUN, tenant_id="t1", kind="../x", media_type="text/plain", text="x", now_ms=1
        )


async def test_a_missing_or_tampered_payload_fails_alone_with_a_clear_error(
    payload_store: PayloadStore, store: Store, tmp_path: Path
) -> None:
    payload_id = await put(payload_store)
    stored = await payload_store.find(run_id=RUN, payload_id=payload_id, tenant_id="t1")
    assert stored is not None
    if payload_store.mode == "file":
        path = tmp_path / "payloads" / RUN / payload_id
        path.write_bytes(path.read_bytes()[:1000])
    else:
        await store.db.transaction(lambda c: c.execute(update(payloads).values(content=b"x" * 1000)))
    with pytest.raises(UnreadableRecord) as caught:
        [p async for p in payload_store.chunks(stored, chunk_bytes=4096)]
    assert f"payload {payload_id}" in caught.value.message and caught.value.metadata["run_id"] == RUN
    if payload_store.mode == "file":
        (tmp_path / "payloads" / RUN / payload_id).unlink()
        with pytest.raises(UnreadableRecord, match="missing"):
            [p async for p in payload_store.chunks(stored, chunk_bytes=4096)]


async def test_a_stored_location_never_becomes_a_path(store: Store, tmp_path: Path) -> None:
    file_store = store.payload_store(mode="file", root=tmp_path / "payloads")
    payload_id = await put(file_store)
    (tmp_path / "secret").write_bytes(DATA)
    await store.db.transaction(lambda c: c.execute(update(payloads).values(location="file:../secret")))
    stored = await file_store.find(run_id=RUN, payload_id=payload_id, tenant_id="t1")
    assert stored is not None
    with pytest.raises(UnreadableRecord, match="unexpected location"):
        [p async for p in file_store.chunks(stored, chunk_bytes=4096)]


async def test_sealed_payloads_do_not_open_under_another_run(tmp_path: Path, sqlite_url: str) -> None:
    write_key_file(tmp_path / "keys.json", keys={"k1": bytes(range(32))}, active="k1")
    store = await Store.open(sqlite_url, cipher=load_cipher(str(tmp_path / "keys.json")))
    try:
        ps = store.payload_store()
        payload_id = await put(ps)
        other = "0190a0b0c0d0e0f0001122334455ff"
        await ps.put(run_id=other, tenant_id="t1", kind="output", media_type="text/plain", text="y", now_ms=1)
        sealed = await store.db.transaction(
            lambda c: c.execute(select(payloads.c.content).where(payloads.c.run_id == RUN)).scalar()
        )
        # The first run's sealed bytes copied under the other run (same payload id) must not open.
        await store.db.transaction(
            lambda c: c.execute(
                payloads.insert().values(
                    run_id=other,
                    payload_id=payload_id,
                    tenant_id="t1",
                    kind="output",
                    media_type="x",
                    size_bytes=len(DATA),
                    sha256=payload_id,
                    location="db",
                    content=sealed,
                    created_ms=1,
                )
            )
        )
        stored = await ps.find(run_id=other, payload_id=payload_id, tenant_id="t1")
        assert stored is not None
        with pytest.raises(UnreadableRecord, match="cannot be opened"):
            [p async for p in ps.chunks(stored, chunk_bytes=4096)]
    finally:
        await store.close()
    raw = (
        sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))
        .execute("select content from run_payloads")
        .fetchall()
    )
    assert all(TEXT[:50].encode() not in bytes(r[0]) for r in raw)


def test_the_file_store_needs_a_root(store: Store) -> None:
    with pytest.raises(ValueError, match="root"):
        PayloadStore(db=store.db, crypt=store._crypt, mode="file")


async def test_a_runs_payloads_are_deleted_rows_and_files(
    payload_store: PayloadStore, tmp_path: Path
) -> None:
    await put(payload_store)
    other = "0190a0b0c0d0e0f0001122334455ff"
    kept = await payload_store.put(
        run_id=other, tenant_id="t1", kind="output", media_type="text/plain", text="y" * 5000, now_ms=1
    )
    assert await payload_store.delete_run(RUN) == 1
    assert (
        await payload_store.find(run_id=RUN, payload_id=hashlib.sha256(DATA).hexdigest(), tenant_id="t1")
        is None
    )
    assert not (tmp_path / "payloads" / RUN).exists()
    assert await payload_store.find(run_id=other, payload_id=kept.payload_id, tenant_id="t1") is not None
    assert await payload_store.delete_run(RUN) == 0
    with pytest.raises(InvalidRequest):
        await payload_store.delete_run("../x")
