"""The ledger scoped by tenant, migrated in place from the first schema, and sealed at rest."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentrt.toolhost._errors import ErrorCode
from agentrt.toolhost._ledger import Fenced, Ledger, OperationStatus, Replay, Start, sealing_aad
from agentrt.toolhost._ledger_backend import LedgerBackend
from agentrt.toolhost._ledger_schema import SCHEMA_VERSION, LedgerVersionError
from agentrt.toolhost._outcome import Outcome
from agentrt.toolhost._server import parse_metadata
from agentrt.toolhost._status import InvalidRequest
from agentrt.toolhost.security import MAX_FENCING_TOKEN, CipherError, PayloadCipher
from tests.unit._ledgers import BACKENDS, OpenLedger, ledger_factory

CIPHER = PayloadCipher(keys={"k1": b"k" * 32}, active="k1")


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.sqlite"


@pytest.fixture(params=BACKENDS)
def open_ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenLedger]:
    yield from ledger_factory(request, tmp_path)


@pytest.fixture
def ledger(open_ledger: OpenLedger) -> LedgerBackend:
    """The same tenancy on both backends (SQLite, and the PostgreSQL ledger of a pool)."""
    return open_ledger("life-1")


def _begin(ledger: LedgerBackend, tenant: str, key: str = "k1", **overrides: Any) -> Any:
    kwargs: dict[str, Any] = {
        "tenant": tenant,
        "idempotency_key": key,
        "tool": "refund.issue",
        "input_hash": "h1",
        "run_id": "run-1",
        "call_id": "call-1",
        "rerun_after_crash": False,
    }
    kwargs.update(overrides)
    return ledger.begin(**kwargs)


def test_the_same_key_in_two_tenants_is_two_entries(ledger: LedgerBackend) -> None:
    assert isinstance(_begin(ledger, "acme"), Start)
    ledger.finish("k1", Outcome.success('{"who": "acme"}'), tenant="acme")
    # Another tenant neither collides (other arguments are no conflict) nor replays acme's result.
    other = _begin(ledger, "globex", input_hash="h2")
    assert isinstance(other, Start) and other.record.tenant == "globex"
    ledger.finish("k1", Outcome.success('{"who": "globex"}'), tenant="globex")
    acme, globex = ledger.get("k1", tenant="acme"), ledger.get("k1", tenant="globex")
    assert acme is not None and globex is not None
    assert (acme.outcome, globex.outcome) == (
        Outcome.success('{"who": "acme"}'),
        Outcome.success('{"who": "globex"}'),
    )
    assert ledger.get("k1") is None  # the development tenant "" has no such key
    assert isinstance(_begin(ledger, "acme"), Replay)


def test_fencing_is_per_tenant_and_run(ledger: LedgerBackend) -> None:
    assert ledger.check_fence("run-1", 2**63 - 1, tenant="mallory") is None
    # The same run id in another tenant is unaffected by mallory's huge token.
    assert isinstance(_begin(ledger, "acme", fencing_token=3), Start)
    assert ledger.check_fence("run-1", 2, tenant="acme") == 3
    assert isinstance(_begin(ledger, "acme", "k2", fencing_token=2), Fenced)
    assert isinstance(_begin(ledger, "globex", "k2", fencing_token=1), Start)


_V0_SCHEMA = """
CREATE TABLE operations (
    idempotency_key TEXT PRIMARY KEY, tool TEXT NOT NULL, input_hash TEXT NOT NULL, run_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('RUNNING', 'SUCCEEDED', 'FAILED')),
    result_json TEXT, error_code TEXT, error_message TEXT, error_details_json TEXT, owner TEXT NOT NULL,
    executions INTEGER NOT NULL, create_time_ns INTEGER NOT NULL, update_time_ns INTEGER NOT NULL
);
CREATE TABLE fencing (run_id TEXT PRIMARY KEY, token INTEGER NOT NULL, update_time_ns INTEGER NOT NULL);
INSERT INTO operations VALUES ('old-ok', 'orders.lookup', 'h', 'run-0', 'c0', 'SUCCEEDED', '{"a": 1}',
    NULL, NULL, NULL, 'dead', 1, 1, 2);
INSERT INTO operations VALUES ('old-failed', 'refund.issue', 'h', 'run-0', 'c1', 'FAILED', NULL,
    'PERMANENT', 'no such order', '{"order_id": "Z"}', 'dead', 1, 1, 2);
INSERT INTO fencing VALUES ('run-0', 7, 3);
"""


def test_a_first_schema_ledger_is_migrated_in_place_under_tenant_empty(path: Path) -> None:
    db = sqlite3.connect(path)
    db.executescript(_V0_SCHEMA)
    db.close()
    with Ledger(path, owner="life-2", cipher=CIPHER) as ledger:  # old plaintext rows read with a cipher on
        ok, failed = ledger.get("old-ok"), ledger.get("old-failed")
        assert ok is not None and failed is not None
        assert (ok.tenant, ok.status, ok.outcome) == (
            "",
            OperationStatus.SUCCEEDED,
            Outcome.success('{"a": 1}'),
        )
        assert failed.outcome == Outcome.error(ErrorCode.PERMANENT, "no such order", {"order_id": "Z"})
        assert ledger.check_fence("run-0", 6) == 7  # its fencing tokens came along
        assert ledger.get("old-ok", tenant="acme") is None
    with Ledger(path, owner="life-3") as again:  # opening again is a no-op
        assert again.get("old-ok") is not None
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert tables == {"operations", "fencing", "intents"}
    finally:
        db.close()


def test_a_ledger_from_a_newer_host_is_refused(path: Path) -> None:
    with Ledger(path, owner="life-1"):
        pass
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(LedgerVersionError, match="newer"):
        Ledger(path, owner="life-2")


def _raw(path: Path, key: str, tenant: str = "acme") -> dict[str, Any]:
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    try:
        row = db.execute(
            "SELECT * FROM operations WHERE tenant = ? AND idempotency_key = ?", (tenant, key)
        ).fetchone()
        return dict(row)
    finally:
        db.close()


def test_outcomes_are_sealed_at_rest_and_bound_to_their_key(path: Path) -> None:
    with Ledger(path, owner="life-1", cipher=CIPHER) as ledger:
        _begin(ledger, "acme", "ok")
        ledger.finish("ok", Outcome.success('{"customer": "Ada"}'), tenant="acme")
        _begin(ledger, "acme", "bad")
        ledger.finish("bad", Outcome.error(ErrorCode.PERMANENT, "card declined", {"why": "x"}), tenant="acme")
        assert ledger.get("ok", tenant="acme").outcome == Outcome.success('{"customer": "Ada"}')  # type: ignore[union-attr]
    ok, bad = _raw(path, "ok"), _raw(path, "bad")
    assert ok["result_json"].startswith("enc:v1:k1:") and "Ada" not in ok["result_json"]
    assert bad["error_code"] == "PERMANENT"  # codes, ids and times stay in clear
    assert all(bad[c].startswith("enc:v1:k1:") for c in ("error_message", "error_details_json"))
    with Ledger(path, owner="life-2", cipher=CIPHER) as reopened:
        assert reopened.get("bad", tenant="acme").outcome == Outcome.error(  # type: ignore[union-attr]
            ErrorCode.PERMANENT, "card declined", {"why": "x"}
        )
        # A sealed value copied onto another key does not open there.
        db = sqlite3.connect(path)
        db.execute(
            "UPDATE operations SET result_json = ? WHERE idempotency_key = 'bad'", (ok["result_json"],)
        )
        db.execute("UPDATE operations SET status = 'SUCCEEDED' WHERE idempotency_key = 'bad'")
        db.commit()
        db.close()
        with pytest.raises(CipherError):
            reopened.get("bad", tenant="acme")
    assert (
        CIPHER.open(ok["result_json"], aad=sealing_aad("acme", "ok", "result_json")) == '{"customer": "Ada"}'
    )


@pytest.mark.parametrize("name", ["x-agentrt-fencing-token", "x-agentrt-attempt"])
@pytest.mark.parametrize("value", [str(MAX_FENCING_TOKEN + 1), str(2**64), "9" * 5000, "-1", "1e3"])
def test_out_of_range_integers_in_metadata_are_invalid_argument(name: str, value: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_metadata([("x-agentrt-idempotency-key", "k"), (name, value)])
    assert info.value.reason == "INVALID_METADATA"
    assert len(info.value.message) < 200 and len(info.value.violations[0][1]) < 200


def test_the_largest_fencing_token_is_accepted_and_the_grant_header_is_kept_out_of_repr() -> None:
    meta = parse_metadata(
        [
            ("x-agentrt-idempotency-key", "k"),
            ("x-agentrt-fencing-token", str(MAX_FENCING_TOKEN)),
            ("x-agentrt-call-grant", "secret.grant.text"),
        ]
    )
    assert (meta.fencing_token, meta.grant, meta.tenant) == (MAX_FENCING_TOKEN, "secret.grant.text", "")
    assert "secret.grant.text" not in repr(meta)
