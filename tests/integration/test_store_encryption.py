"""Payload encryption at rest in the run store (R10.2), on SQLite and PostgreSQL.

Runs, events and signals carry recognisable markers; the raw database (SQLite's main file and
WAL, PostgreSQL's tables read as text and through COPY) must hold none of them, and every read
path must hand them back in clear, also after a reopen, a key rotation, or from records written
before encryption was turned on. A record whose key is gone fails alone, with a clear error.
"""

from __future__ import annotations

import base64
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentrt.server.core import ApprovalDecision, ResolveApproval
from agentrt.server.store import (
    SEALED_RUN_COLUMNS,
    RunRecord,
    Store,
    UnreadableRecord,
    decode_signal,
    load_cipher,
)
from agentrt.toolhost.security import PayloadCipher, write_key_file

KEY1 = bytes(range(32))
KEY2 = bytes(range(32, 64))

INPUT = "MARKER-input-please refund order Q7"
SPEC = json.dumps({"instructions": "MARKER-spec-instructions", "tools": ["refund.issue"]})
META = json.dumps({"ticket": "MARKER-meta-ticket"})
ARGS = json.dumps({"tool": "refund.issue", "arguments": {"reason": "MARKER-args-reason"}})
RESULT = json.dumps({"result_json": json.dumps({"customer": "MARKER-result-customer"})})
APPROVAL = json.dumps({"call_id": "c1", "arguments_json": "MARKER-approval-args"})
OUTPUT = "MARKER-output-refunded"
SIGNAL = ResolveApproval(
    approval_id="ap1",
    decision=ApprovalDecision.APPROVE,
    args_hash="h" * 64,
    approver="bob",
    comment="MARKER-signal-decision",
)
MARKERS = [
    "MARKER-input",
    "MARKER-spec",
    "MARKER-meta",
    "MARKER-args",
    "MARKER-result",
    "MARKER-approval",
    "MARKER-output",
    "MARKER-signal",
]
TABLES = ["runs", "run_events", "run_signals", "run_checkpoints"]


def key_file(path: Path, keys: dict[str, bytes], active: str) -> Path:
    write_key_file(path, keys=keys, active=active)
    return path


def cipher(path: Path) -> PayloadCipher:
    loaded = load_cipher(str(path))
    assert loaded is not None
    return loaded


def run_values(
    run_id: str, *, session_id: str | None = None, request_key: str | None = None
) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "tenant_id": "t",
        "agent_name": "refund",
        "agent_spec": SPEC,
        "input": INPUT,
        "output": "",
        "reason": "",
        "phase": "QUEUED",
        "budgets": "{}",
        "usage": "{}",
        "request_key": request_key,
        "session_id": session_id,
        "metadata": META,
        "deadline_ms": 10**13,
        "lease_owner": "w1",
        "lease_expires_ms": 10**13,
        "lease_generation": 1,
        "cancel_requested_ms": None,
        "cancel_reason": None,
        "state_version": 1,
        "runtime_version": "0",
        "agent_config_hash": "h",
    }


async def write_run(store: Store, run_id: str, *, session_id: str | None = None) -> None:
    """A run with markers everywhere: input, spec, metadata, tool arguments and results, approval,
    output, and a queued signal; it ends COMPLETED (so it counts as a session turn)."""
    await store.create_run(
        run_values(run_id, session_id=session_id, request_key=f"rk-{run_id}"),
        [("run.started", json.dumps({"input": INPUT}))],
        1000,
    )
    await store.append(
        run_id,
        expected_revision=1,
        owner="w1",
        first_seq=2,
        new_events=[("tool.started", ARGS), ("approval.requested", APPROVAL)],
        values={"phase": "WAITING_APPROVAL", "pending_approval": APPROVAL},
        now_ms=1001,
    )
    assert await store.add_signal(run_id, signal=SIGNAL, now_ms=1002)
    await store.append(
        run_id,
        expected_revision=2,
        owner="w1",
        first_seq=4,
        new_events=[("tool.completed", RESULT), ("run.ended", json.dumps({"output": OUTPUT}))],
        values={"phase": "COMPLETED", "pending_approval": None, "output": OUTPUT},
        now_ms=1003,
    )


EXPECTED_EVENTS = [
    ("run.started", json.dumps({"input": INPUT})),
    ("tool.started", ARGS),
    ("approval.requested", APPROVAL),
    ("tool.completed", RESULT),
    ("run.ended", json.dumps({"output": OUTPUT})),
]


async def assert_reads_back(store: Store, run_id: str, *, session_id: str | None = None) -> RunRecord:
    record = await store.get_run(run_id)
    assert record is not None
    assert (record.input, record.output, record.agent_spec, record.metadata) == (INPUT, OUTPUT, SPEC, META)
    assert record.pending_approval is None and record.phase == "COMPLETED" and record.last_seq == 5
    assert [(e.type, e.payload) for e in await store.read_events(run_id)] == EXPECTED_EVENTS
    assert [e.seq for e in await store.read_events(run_id, after_seq=2)] == [3, 4, 5]
    read, page = await store.read_run_and_page(run_id, after_seq=0, max_rows=100, max_bytes=10**6)
    assert read == record and [(e.type, e.payload) for e in page.events] == EXPECTED_EVENTS
    page = await store.read_page(run_id, after_seq=2, max_rows=100, max_bytes=10**6)
    assert [(e.type, e.payload) for e in page.events] == EXPECTED_EVENTS[2:]
    assert [decode_signal(s.kind, s.payload) for s in await store.read_signals(run_id)] == [SIGNAL]
    assert await store.get_run(run_id, tenant_id="t") == record
    assert await store.find_by_request_key("t", f"rk-{run_id}") == record
    listed, _ = await store.list_runs(tenant_id="t")
    assert record in listed
    if session_id is not None:
        assert record in await store.session_turns(tenant_id="t", session_id=session_id, limit=10)
    return record


def sqlite_path(db_url: str) -> Path:
    return Path(db_url.removeprefix("sqlite:///"))


def pg_conninfo(db_url: str) -> str:
    return db_url.replace("postgresql+psycopg://", "postgresql://", 1)


def raw_bytes(db_url: str) -> bytes:
    """Everything the database holds for our tables, as stored.

    SQLite: the main file and the WAL, whatever has been checkpointed. PostgreSQL: every row of
    every table cast to text, and the tables through ``COPY ... TO STDOUT``.
    """
    if db_url.startswith("sqlite"):
        path = sqlite_path(db_url)
        files = [path, path.with_name(path.name + "-wal")]
        return b"".join(f.read_bytes() for f in files if f.exists())
    out = bytearray()
    with psycopg.connect(pg_conninfo(db_url)) as conn:
        for table in TABLES:
            for (text,) in conn.execute(f"SELECT t::text FROM {table} t"):
                out += text.encode()
            with conn.cursor().copy(f"COPY {table} TO STDOUT") as copy:
                for chunk in copy:
                    out += bytes(chunk)
    return bytes(out)


def raw_query(db_url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """A statement straight on the database, around the store (``?`` placeholders)."""
    if db_url.startswith("sqlite"):
        with sqlite3.connect(sqlite_path(db_url)) as conn:
            return list(conn.execute(sql, params))
    with psycopg.connect(pg_conninfo(db_url)) as conn:
        cursor = conn.execute(sql.replace("?", "%s"), params)
        return list(cursor.fetchall()) if cursor.description else []


def assert_no_marker(raw: bytes) -> None:
    found = [m for m in MARKERS if m.encode() in raw]
    assert found == [], f"plaintext at rest: {found}"


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    return key_file(tmp_path / "keys.json", {"k1": KEY1}, "k1")


@pytest.fixture
async def store(db_url: str, keys: Path) -> AsyncIterator[Store]:
    opened = await Store.open(db_url, cipher=cipher(keys))
    try:
        yield opened
    finally:
        await opened.close()


async def test_nothing_readable_at_rest_and_everything_reads_back_after_a_reopen(
    db_url: str, keys: Path
) -> None:
    store = await Store.open(db_url, cipher=cipher(keys))
    try:
        await write_run(store, "r1", session_id="s1")
        await write_run(store, "r2")
        before = await assert_reads_back(store, "r1", session_id="s1")
        # A live store: on SQLite the WAL has not been checkpointed yet.
        raw = raw_bytes(db_url)
        assert b"r1" in raw and b"enc:v1:k1:" in raw  # ids in clear, payloads sealed
        assert_no_marker(raw)
        if db_url.startswith("sqlite"):
            raw_query(db_url, "PRAGMA wal_checkpoint(TRUNCATE)")
            assert_no_marker(raw_bytes(db_url))
        # Every sealed value names its key; ids, phases, seq stay queryable in clear.
        rows = raw_query(
            db_url, "SELECT input, output, agent_spec, metadata FROM runs WHERE run_id = ?", ("r1",)
        )
        assert all(str(v).startswith("enc:v1:k1:") for v in rows[0])
        assert raw_query(db_url, "SELECT phase FROM runs WHERE run_id = ?", ("r1",)) == [("COMPLETED",)]
        # request_cancel hands back the row in clear too (the run has ended: nothing changes).
        cancelled = await store.request_cancel("r1", tenant_id="t", reason="x", requested_by="u", now_ms=2000)
        assert cancelled == before
        assert await store.active_session_run(tenant_id="t", session_id="s1") is None
    finally:
        await store.close()
    assert_no_marker(raw_bytes(db_url))  # after the close (SQLite checkpoints into the main file)

    reopened = await Store.open(db_url, cipher=cipher(keys))
    try:
        assert await assert_reads_back(reopened, "r1", session_id="s1") == before
        await assert_reads_back(reopened, "r2")
    finally:
        await reopened.close()


async def test_an_active_run_reads_back_with_its_pending_approval(store: Store, db_url: str) -> None:
    await store.create_run(run_values("r1", session_id="s1"), [("run.started", "{}")], 1000)
    await store.append(
        "r1",
        expected_revision=1,
        owner="w1",
        first_seq=2,
        new_events=[("approval.requested", APPROVAL)],
        values={"phase": "WAITING_APPROVAL", "pending_approval": APPROVAL},
        now_ms=1001,
    )
    active = await store.active_session_run(tenant_id="t", session_id="s1")
    assert active is not None and active.pending_approval == APPROVAL and active.input == INPUT
    cancelled = await store.request_cancel("r1", tenant_id="t", reason="stop", requested_by="u", now_ms=1002)
    assert cancelled is not None and cancelled.cancel_reason == "stop"
    assert cancelled.pending_approval == APPROVAL and cancelled.metadata == META
    assert_no_marker(raw_bytes(db_url))


async def test_a_rotated_key_reads_old_and_new_records_and_seals_new_ones_with_the_new_key(
    db_url: str, tmp_path: Path
) -> None:
    path = key_file(tmp_path / "keys.json", {"k1": KEY1}, "k1")
    store = await Store.open(db_url, cipher=cipher(path))
    try:
        await write_run(store, "old")
        await store.create_run(run_values("open"), [("run.started", "{}")], 1000)  # continues after rotation
    finally:
        await store.close()

    key_file(path, {"k1": KEY1, "k2": KEY2}, "k2")
    store = await Store.open(db_url, cipher=cipher(path))
    try:
        await write_run(store, "new")
        await store.append(
            "open",
            expected_revision=1,
            owner="w1",
            first_seq=2,
            new_events=[("tool.started", ARGS)],
            values={"output": OUTPUT},
            now_ms=1001,
        )
        await assert_reads_back(store, "old")
        await assert_reads_back(store, "new")
        record = await store.get_run("open")
        assert record is not None and (record.input, record.output) == (INPUT, OUTPUT)
        assert [e.payload for e in await store.read_events("open")] == ["{}", ARGS]
    finally:
        await store.close()

    def key_ids(sql: str, run_id: str) -> set[str]:
        return {str(v).split(":")[2] for row in raw_query(db_url, sql, (run_id,)) for v in row if v}

    assert key_ids("SELECT payload FROM run_events WHERE run_id = ?", "old") == {"k1"}
    assert key_ids("SELECT payload FROM run_events WHERE run_id = ?", "new") == {"k2"}
    assert key_ids("SELECT payload FROM run_signals WHERE run_id = ?", "new") == {"k2"}
    assert key_ids("SELECT input, agent_spec, output FROM runs WHERE run_id = ?", "new") == {"k2"}
    # The run that lived through the rotation: old values keep k1, rewritten ones take k2.
    assert key_ids("SELECT payload FROM run_events WHERE run_id = ? AND seq = 1", "open") == {"k1"}
    assert key_ids("SELECT payload FROM run_events WHERE run_id = ? AND seq = 2", "open") == {"k2"}
    assert key_ids("SELECT input, output FROM runs WHERE run_id = ?", "open") == {"k1", "k2"}
    assert_no_marker(raw_bytes(db_url))


async def test_records_written_before_encryption_was_turned_on_still_read(db_url: str, keys: Path) -> None:
    plain = await Store.open(db_url)
    try:
        await write_run(plain, "before")
        assert b"MARKER-input" in raw_bytes(db_url)  # no cipher: stored as given
    finally:
        await plain.close()

    store = await Store.open(db_url, cipher=cipher(keys))
    try:
        await assert_reads_back(store, "before")
        await write_run(store, "after")
        await assert_reads_back(store, "after")
        payloads = raw_query(db_url, "SELECT payload FROM run_events WHERE run_id = ?", ("after",))
        assert all(p.startswith("enc:v1:k1:") for (p,) in payloads)
        payloads = raw_query(db_url, "SELECT payload FROM run_events WHERE run_id = ?", ("before",))
        assert not any(p.startswith("enc:") for (p,) in payloads)
    finally:
        await store.close()


async def test_a_record_whose_key_left_the_file_fails_alone_with_a_clear_error(
    db_url: str, tmp_path: Path
) -> None:
    path = key_file(tmp_path / "keys.json", {"k1": KEY1}, "k1")
    store = await Store.open(db_url, cipher=cipher(path))
    try:
        await write_run(store, "lost", session_id="s1")
        await store.create_run(run_values("waiting", session_id="s2"), [("run.started", "{}")], 1000)
    finally:
        await store.close()
    key_file(path, {"k2": KEY2}, "k2")  # k1 dropped from the file
    store = await Store.open(db_url, cipher=cipher(path))
    try:
        await write_run(store, "kept")
        for read in (
            store.get_run("lost"),
            store.read_events("lost"),
            store.read_signals("lost"),
            store.find_by_request_key("t", "rk-lost"),
            store.session_turns(tenant_id="t", session_id="s1", limit=5),
            store.request_cancel("waiting", tenant_id="t", reason="x", requested_by="u", now_ms=2000),
        ):
            with pytest.raises(UnreadableRecord) as caught:
                await read
            error = caught.value
            run_id = error.metadata["run_id"]
            assert error.reason == "RECORD_UNREADABLE" and run_id in ("lost", "waiting")
            assert f"run {run_id}" in error.message and "'k1'" in error.message
            for secret in (KEY1, KEY2):
                assert base64.b64encode(secret).decode() not in error.message
        # Every other run reads as ever; a listing still shows the lost run, without its payloads.
        await assert_reads_back(store, "kept")
        listed, _ = await store.list_runs(tenant_id="t")
        lost = next(r for r in listed if r.run_id == "lost")
        assert (lost.input, lost.output, lost.metadata, lost.pending_approval) == ("", "", "{}", None)
        assert lost.phase == "COMPLETED"
        # The session gate only needs the active run's id: it still finds it.
        active = await store.active_session_run(tenant_id="t", session_id="s2")
        assert active is not None and active.run_id == "waiting" and active.input == ""
    finally:
        await store.close()


async def test_a_value_moved_to_another_place_does_not_open(store: Store, db_url: str) -> None:
    await write_run(store, "a")
    await write_run(store, "b")
    # Another run's input, and another seq's payload: both authenticate only where they were sealed.
    (a_input,) = raw_query(db_url, "SELECT input FROM runs WHERE run_id = ?", ("a",))[0]
    raw_query(db_url, "UPDATE runs SET input = ? WHERE run_id = ?", (a_input, "b"))
    (seq2,) = raw_query(db_url, "SELECT payload FROM run_events WHERE run_id = ? AND seq = 2", ("a",))[0]
    raw_query(db_url, "UPDATE run_events SET payload = ? WHERE run_id = ? AND seq = 3", (seq2, "a"))
    with pytest.raises(UnreadableRecord, match=r"run b: runs.input cannot be read: .*does not authenticate"):
        await store.get_run("b")
    with pytest.raises(UnreadableRecord, match=r"run a: run_events.payload \(seq 3\).*does not authenticate"):
        await store.read_events("a")
    record = await store.get_run("a")
    assert record is not None and record.input == INPUT


async def test_sealed_records_read_without_a_key_file_fail_clearly(db_url: str, keys: Path) -> None:
    store = await Store.open(db_url, cipher=cipher(keys))
    try:
        await write_run(store, "r1")
    finally:
        await store.close()
    plain = await Store.open(db_url)
    try:
        with pytest.raises(UnreadableRecord, match=r"no \[encryption\] key_file is configured"):
            await plain.get_run("r1")
        with pytest.raises(UnreadableRecord, match=r"run_events\.payload"):
            await plain.read_events("r1")
    finally:
        await plain.close()


async def test_every_sealed_column_is_a_column_of_runs_that_holds_a_sealed_value(
    store: Store, db_url: str
) -> None:
    # One marker per sealed column, each set the way the engine sets it: at creation or by an append.
    marked = {column: json.dumps({"MARKER-column": column}) for column in SEALED_RUN_COLUMNS}
    created = run_values("r1")
    created.update({column: text for column, text in marked.items() if column in created})
    await store.create_run(created, [("run.started", "{}")], 1000)
    appended = {column: text for column, text in marked.items() if column not in created}
    await store.append(
        "r1",
        expected_revision=1,
        owner="w1",
        first_seq=2,
        new_events=[("approval.requested", "{}")],
        values={"phase": "WAITING_APPROVAL", **appended},
        now_ms=1001,
    )

    (row,) = raw_query(db_url, f"SELECT {', '.join(SEALED_RUN_COLUMNS)} FROM runs WHERE run_id = ?", ("r1",))
    assert [
        column
        for column, value in zip(SEALED_RUN_COLUMNS, row, strict=True)
        if not str(value).startswith("enc:v1:k1:")
    ] == []
    assert b"MARKER-column" not in raw_bytes(db_url)
    record = await store.get_run("r1")
    assert record is not None
    assert {column: getattr(record, column) for column in SEALED_RUN_COLUMNS} == marked


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read key file"),
        ("not json", "is not JSON"),
        (json.dumps({"active": "k1", "keys": {"k1": base64.b64encode(b"short").decode()}}), "5 bytes"),
        (json.dumps({"active": "k9", "keys": {"k1": base64.b64encode(KEY1).decode()}}), "active key"),
        (json.dumps({"active": "k1", "keys": {"k1": "!!!"}}), "not base64"),
    ],
)
def test_a_bad_key_file_is_refused_naming_the_file_and_never_the_key(
    tmp_path: Path, content: str | None, expected: str
) -> None:
    path = tmp_path / "keys.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError) as caught:
        load_cipher(str(path))
    message = str(caught.value)
    assert str(path) in message and expected in message
    assert base64.b64encode(KEY1).decode() not in message and "c2hvcnQ" not in message


def test_no_key_file_means_no_encryption() -> None:
    assert load_cipher("") is None
