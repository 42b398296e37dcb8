"""The shared operation ledger of a tool host pool, in PostgreSQL (R5.4, R10.5).

Same semantics and invariants as the SQLite :class:`~agentrt.toolhost._ledger.Ledger`, across
every host of the pool:

- At most one execution per (tenant, idempotency key): the RUNNING entry is inserted with
  ``INSERT ... ON CONFLICT DO NOTHING`` (a second host's insert waits for the first one's commit,
  then does nothing), and every other decision is taken under ``SELECT ... FOR UPDATE`` on the
  key's row, in one transaction.
- Fencing tokens only grow, per (tenant, run), whichever host saw them: the check and the
  remembering are one transaction on the run's ``fencing`` row.
- Outcome columns are sealed exactly as in SQLite (``_ledger_codec``).

Liveness: each host writes a heartbeat row (``hosts``, the database's clock) every third of its
owner TTL, from a thread with a connection of its own, and deletes it when it closes. A RUNNING
entry whose owner has no fresh heartbeat was left by a dead host: a safe call runs again, a write
is an unknown outcome that any host's ``GetOperation`` settles through the plugin's query hook.
A live owner's RUNNING entry is :class:`~agentrt.toolhost._ledger_types.Busy`: never run twice at
once. A host cut off from PostgreSQL for longer than the TTL counts as dead; its calls could not
record their outcome anyway.

Sync or async: the ledger stays synchronous and is called from the host's event loop, as the
SQLite one is, so "look up, then start the task" stays atomic within the process (an InFlight
duplicate always finds the running task). The price, measured on this 2-core machine
(``bench/ledger_backends.py``): a call's ``begin`` plus ``finish`` hold the loop for p50 1.2 ms
(two commits, each waiting for its WAL flush) against 0.06 ms on SQLite, and one host serves about
230 calls/s under concurrency against 1,600 (``bench/tool_call.py --ledger-url``). A pool scales
by its hosts. ``statement_timeout`` bounds how long a stalled database can hold the loop.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row

from agentrt.toolhost._cipher import PayloadCipher
from agentrt.toolhost._ledger import (
    _FINISH,
    _INSERT_IF_NEW,
    _INSERT_IF_NEW_AND_NOT_FENCED,
    _MAX_KNOWN_FENCES,
    _RECORD_READ,
    _RUN_AGAIN,
    _SELECT,
    _SETTLE_UNSURE,
    record_read_params,
)
from agentrt.toolhost._ledger_codec import LedgerCodec
from agentrt.toolhost._ledger_pg_config import PgLedgerOptions
from agentrt.toolhost._ledger_pg_schema import open_pg_schema
from agentrt.toolhost._ledger_retention import LedgerPruneCounts
from agentrt.toolhost._ledger_types import (
    Decision,
    Fenced,
    LedgerUnavailable,
    OperationRecord,
    OperationStatus,
    ReadCall,
    Start,
)
from agentrt.toolhost._ledger_verdict import Verdict, decision_of, owner_alive, rerun_record, verdict_on
from agentrt.toolhost._outcome import Outcome

__all__ = ["PgLedger"]

_log = logging.getLogger(__name__)

Row = dict[str, Any]
Connection = psycopg.Connection[Row]

_CONNECT_TIMEOUT_S = 5
# Bounds how long one ledger statement can hold the host's event loop.
_STATEMENT_TIMEOUT_MS = 5000
_BATCH = 500
# The database's clock in epoch nanoseconds: heartbeats and their checks use one clock.
_DB_NOW_NS = "(extract(epoch FROM clock_timestamp()) * 1000000000)::bigint"


def _pg(sql: str) -> str:
    """The SQLite ledger's statement for psycopg: ``?`` placeholders become ``%s``."""
    return sql.replace("?", "%s")


_SELECT_FOR_UPDATE = _pg(_SELECT) + " FOR UPDATE"
# Only a dead owner's entry is settled by another host: its heartbeat is gone or stale.
_SETTLE_ORPHAN = (
    "UPDATE operations SET status = %s, result_json = %s, error_code = %s, error_message = %s,"
    " error_details_json = %s, update_time_ns = %s WHERE tenant = %s AND idempotency_key = %s"
    " AND status = 'RUNNING' AND owner != %s AND NOT EXISTS (SELECT 1 FROM hosts h"
    f" WHERE h.owner = operations.owner AND h.beat_ns > {_DB_NOW_NS} - %s)"
)
_OWNER_BEAT = f"SELECT (SELECT beat_ns FROM hosts WHERE owner = %s) AS beat_ns, {_DB_NOW_NS} AS now_ns"
_BEAT = (
    f"INSERT INTO hosts (owner, beat_ns) VALUES (%s, {_DB_NOW_NS})"
    " ON CONFLICT (owner) DO UPDATE SET beat_ns = excluded.beat_ns"
)
_DELETE_OPERATIONS = (
    "DELETE FROM operations WHERE (tenant, idempotency_key) IN (SELECT tenant, idempotency_key"
    " FROM operations WHERE status != 'RUNNING' AND update_time_ns < %s LIMIT %s)"
)
_DELETE_FENCES = (
    "DELETE FROM fencing WHERE (tenant, run_id) IN (SELECT tenant, run_id FROM fencing f"
    " WHERE f.update_time_ns < %s AND NOT EXISTS (SELECT 1 FROM operations o"
    " WHERE o.tenant = f.tenant AND o.run_id = f.run_id) LIMIT %s)"
)
_DELETE_INTENTS = (
    "DELETE FROM intents WHERE (tenant, scope, scope_id, intent_key) IN (SELECT tenant, scope,"
    " scope_id, intent_key FROM intents i WHERE i.claim_time_ns < %s AND NOT EXISTS (SELECT 1"
    " FROM operations o WHERE o.tenant = i.tenant AND o.idempotency_key = i.idempotency_key) LIMIT %s)"
)
# Heartbeats of hosts that signed off without deleting theirs (killed), long after they expired.
_DELETE_DEAD_HOSTS = f"DELETE FROM hosts WHERE beat_ns < {_DB_NOW_NS} - %s"


class _Transaction:
    """A transaction as :class:`~agentrt.toolhost._ledger_backend.LedgerTransaction`: ``?`` SQL."""

    def __init__(self, db: Connection) -> None:
        self._db = db

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> psycopg.Cursor[Row]:
        return self._db.execute(_pg(sql), parameters)


class PgLedger:
    """The operation ledger of a host pool, in one PostgreSQL schema every host shares.

    Args:
        options: Where the ledger lives and the owner TTL (from the host's own configuration).
        owner: Id of this host process life, unique across the pool.
        cipher: Seals the outcome columns when given (every host of a pool needs the same keys).
        heartbeat: Write a heartbeat from a background thread; tests of dead owners turn it off.

    Raises:
        LedgerUnavailable: The database cannot be reached or refused; the message has no password.
        LedgerVersionError: The schema was written by a newer tool host.
    """

    def __init__(
        self,
        options: PgLedgerOptions,
        *,
        owner: str,
        cipher: PayloadCipher | None = None,
        heartbeat: bool = True,
    ) -> None:
        self._options = options
        self._owner = owner
        self._codec = LedgerCodec(cipher)
        self._ttl_ns = round(options.owner_ttl_s * 1e9)
        self._closed = False
        self._known_fences: dict[tuple[str, str], int] = {}
        with self._errors("open"):
            db = psycopg.connect(options.url, autocommit=True, connect_timeout=_CONNECT_TIMEOUT_S)
            try:
                open_pg_schema(db, options.schema)
            finally:
                db.close()
            self._db = self._connect()
            try:
                self._db.execute(_BEAT, (owner,))
            except BaseException:
                self._db.close()
                raise
        self._stop = threading.Event()
        self._heart: threading.Thread | None = None
        if heartbeat:
            self._heart = threading.Thread(target=self._heartbeat, name="ledger-heartbeat", daemon=True)
            self._heart.start()

    @property
    def owner(self) -> str:
        """Id of this host process life."""
        return self._owner

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    @property
    def description(self) -> str:
        """The database (password masked) and schema, for log lines."""
        return f"{self._options.safe_url} schema {self._options.schema}"

    def close(self) -> None:
        """Stop the heartbeat, sign off (other hosts may settle what this one left RUNNING), close."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._heart is not None:
            self._heart.join(timeout=_CONNECT_TIMEOUT_S + 1)
        with contextlib.suppress(psycopg.Error):
            if not self._db.closed:
                self._db.execute("DELETE FROM hosts WHERE owner = %s", (self._owner,))
        self._db.close()

    def __enter__(self) -> PgLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _connect(self) -> Connection:
        db = psycopg.connect(
            self._options.url, autocommit=True, row_factory=dict_row, connect_timeout=_CONNECT_TIMEOUT_S
        )
        try:
            db.execute(f'SET search_path TO "{self._options.schema}"')
            db.execute(f"SET statement_timeout = {_STATEMENT_TIMEOUT_MS}")
        except BaseException:
            db.close()
            raise
        return db

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """Turn a driver error into :class:`LedgerUnavailable`, with the password scrubbed."""
        try:
            yield
        except psycopg.Error as exc:
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            for secret in self._options.secrets:
                text = text.replace(secret, "***")
            raise LedgerUnavailable(
                f"ledger {self.description}: {doing} failed ({type(exc).__name__}: {text})"
            ) from None

    def _conn(self) -> Connection:
        """The event loop's connection, opened again after a lost one (a database restart)."""
        if self._closed:
            raise LedgerUnavailable("the ledger is closed")
        if self._db.closed or self._db.broken:
            self._db = self._connect()
        return self._db

    @contextlib.contextmanager
    def _transaction(self, lock_key: str = "") -> Iterator[Connection]:
        with self._errors("a transaction"):
            db = self._conn()
            with db.transaction():
                if lock_key:
                    # Advisory locks are per database: the schema keeps two pools' keys apart.
                    db.execute(
                        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                        (f"{self._options.schema}:{lock_key}",),
                    )
                yield db

    def transaction(self, *, lock_key: str = "") -> contextlib.AbstractContextManager[_Transaction]:
        """One transaction, serialised against every host holding ``lock_key`` (the intent claims)."""
        return self._wrapped(lock_key)

    @contextlib.contextmanager
    def _wrapped(self, lock_key: str) -> Iterator[_Transaction]:
        with self._transaction(lock_key) as db:
            yield _Transaction(db)

    def get(self, idempotency_key: str, *, tenant: str = "") -> OperationRecord | None:
        """Return the entry of a key in ``tenant``, or None."""
        with self._errors("get"):
            row = self._conn().execute(_pg(_SELECT), (tenant, idempotency_key)).fetchone()
        return self._codec.record(row) if row is not None else None

    def begin(
        self,
        *,
        idempotency_key: str,
        tool: str,
        input_hash: str,
        run_id: str,
        call_id: str,
        rerun_after_crash: bool,
        fencing_token: int | None = None,
        tenant: str = "",
    ) -> Decision:
        """Decide what to do with a call, recording RUNNING when it is to run (see ``Ledger.begin``)."""
        now = time.time_ns()
        token = fencing_token if run_id else None
        fence = (tenant, run_id)
        values = (tenant, idempotency_key, tool, input_hash, run_id, call_id, self._owner, now, now)
        started = Start(_running(values))
        with self._errors("begin"):
            if token is None or self._known_fences.get(fence) == token:
                # The usual call, a new key under a token already remembered, in one statement.
                db = self._conn()
                if token is not None:
                    cursor = db.execute(_pg(_INSERT_IF_NEW_AND_NOT_FENCED), (*values, tenant, run_id, token))
                else:
                    cursor = db.execute(_pg(_INSERT_IF_NEW), values)
                if cursor.rowcount == 1:
                    return started
        with self._transaction() as db:
            if token is not None:
                higher = _fence(db, tenant, run_id, token, now)
                if higher is not None:
                    return Fenced(higher)
            decision = self._decide(db, values, rerun_after_crash=rerun_after_crash, started=started)
        if token is not None:
            self._know_fence(fence, token)
        return decision

    def _decide(
        self, db: Connection, values: tuple[Any, ...], *, rerun_after_crash: bool, started: Start
    ) -> Decision:
        tenant, idempotency_key, tool, input_hash, run_id, call_id, _, now, _ = values
        row = db.execute(_SELECT_FOR_UPDATE, (tenant, idempotency_key)).fetchone()
        if row is None:
            if db.execute(_pg(_INSERT_IF_NEW), values).rowcount == 1:
                return started
            # Another host inserted it meanwhile; its commit is visible to this next statement.
            row = db.execute(_SELECT_FOR_UPDATE, (tenant, idempotency_key)).fetchone()
            if row is None:
                raise LedgerUnavailable("the entry vanished while it was being decided; try again")
        record = self._codec.record(row)
        alive = record.status is OperationStatus.RUNNING and self._alive(db, record.owner)
        verdict = verdict_on(
            record,
            tool=tool,
            input_hash=input_hash,
            me=self._owner,
            record_owner_alive=alive,
            rerun_after_crash=rerun_after_crash,
        )
        if verdict is not Verdict.RUN_AGAIN:
            decision = decision_of(verdict, record)
            assert decision is not None
            return decision
        db.execute(_pg(_RUN_AGAIN), (self._owner, run_id, call_id, now, tenant, idempotency_key))
        return rerun_record(record, owner=self._owner, run_id=run_id, call_id=call_id, now_ns=now)

    def _alive(self, db: Connection, owner: str) -> bool:
        if owner == self._owner:
            return True
        row = db.execute(_OWNER_BEAT, (owner,)).fetchone()
        assert row is not None
        beat = row["beat_ns"]
        return owner_alive(
            beat_ns=None if beat is None else int(beat), now_ns=int(row["now_ns"]), ttl_ns=self._ttl_ns
        )

    def is_orphan(self, record: OperationRecord) -> bool:
        """True when ``record`` is RUNNING under a host of the pool that is gone."""
        if record.status is not OperationStatus.RUNNING or record.owner == self._owner:
            return False
        with self._errors("an owner check"):
            return not self._alive(self._conn(), record.owner)

    def _outcome_params(self, tenant: str, idempotency_key: str, outcome: Outcome) -> tuple[object, ...]:
        columns = self._codec.outcome_columns(tenant, idempotency_key, outcome)
        return (*columns, time.time_ns(), tenant, idempotency_key, self._owner)

    def finish(self, idempotency_key: str, outcome: Outcome, *, tenant: str = "") -> None:
        """Record the outcome of a call this process started (one statement)."""
        params = self._outcome_params(tenant, idempotency_key, outcome)
        with self._errors("finish"):
            self._conn().execute(_pg(_FINISH), params)

    def record_read(self, read: ReadCall, outcome: Outcome) -> None:
        """Record the outcome of a read-only idempotent call, which recorded no RUNNING (one statement)."""
        params = record_read_params(self._codec, read, outcome, owner=self._owner, now_ns=time.time_ns())
        with self._errors("record"):
            self._conn().execute(_pg(_RECORD_READ), params)

    def settle_orphan(self, idempotency_key: str, outcome: Outcome, *, tenant: str = "") -> None:
        """Record the outcome of a call a dead host left RUNNING; a live owner's entry is untouched."""
        params = self._outcome_params(tenant, idempotency_key, outcome)
        with self._errors("settle"):
            self._conn().execute(_SETTLE_ORPHAN, (*params, self._ttl_ns))

    def settle_unsure(self, record: OperationRecord, outcome: Outcome) -> None:
        """Replace a recorded "stopped where it stood, effect unknown" with what its tool reported."""
        params = self._outcome_params(record.tenant, record.idempotency_key, outcome)
        with self._errors("settle"):
            self._conn().execute(_pg(_SETTLE_UNSURE), (*params[:-1], record.update_time_ns))

    def check_fence(self, run_id: str, token: int, *, tenant: str = "") -> int | None:
        """Remember the highest fencing token per (tenant, run), pool-wide, and refuse older ones."""
        with self._transaction() as db:
            higher = _fence(db, tenant, run_id, token, time.time_ns())
        if higher is None:
            self._know_fence((tenant, run_id), token)
        return higher

    def _know_fence(self, fence: tuple[str, str], token: int) -> None:
        if len(self._known_fences) >= _MAX_KNOWN_FENCES and fence not in self._known_fences:
            self._known_fences.clear()
        self._known_fences[fence] = token

    def prune(self, cutoff_ns: int) -> LedgerPruneCounts:
        """One retention pass on a connection of its own, in batches of short statements."""
        with self._errors("pruning"):
            db = self._connect()
            try:
                counts = [0, 0, 0]
                for index, statement in enumerate((_DELETE_OPERATIONS, _DELETE_FENCES, _DELETE_INTENTS)):
                    while True:
                        deleted = db.execute(statement, (cutoff_ns, _BATCH)).rowcount
                        counts[index] += deleted
                        if deleted < _BATCH:
                            break
                # A killed host never deletes its heartbeat; past many TTLs it is only clutter.
                db.execute(_DELETE_DEAD_HOSTS, (100 * self._ttl_ns,))
                return LedgerPruneCounts(operations=counts[0], fences=counts[1], intents=counts[2])
            finally:
                db.close()

    def _heartbeat(self) -> None:
        """Renew this host's heartbeat every third of the TTL until closed (own connection)."""
        db: Connection | None = None
        interval = self._options.owner_ttl_s / 3
        while not self._stop.wait(interval):
            try:
                if db is None or db.closed or db.broken:
                    db = self._connect()
                db.execute(_BEAT, (self._owner,))
            except psycopg.Error as exc:
                # The class only: a driver message may name the server; the URL never reaches a log.
                _log.warning("ledger heartbeat failed (%s); trying again", type(exc).__name__)
                if db is not None:
                    db.close()
                db = None
        if db is not None:
            db.close()


def _running(values: tuple[Any, ...]) -> OperationRecord:
    # Exactly the row the insert writes; reading it back would cost a round trip per call.
    tenant, idempotency_key, tool, input_hash, run_id, call_id, owner, now, _ = values
    return OperationRecord(
        tenant=tenant,
        idempotency_key=idempotency_key,
        tool=tool,
        input_hash=input_hash,
        run_id=run_id,
        call_id=call_id,
        status=OperationStatus.RUNNING,
        outcome=None,
        owner=owner,
        executions=1,
        create_time_ns=now,
        update_time_ns=now,
    )


def _fence(db: Connection, tenant: str, run_id: str, token: int, now: int) -> int | None:
    """The higher token already seen for the run, or None after remembering ``token``."""
    row = db.execute(
        "SELECT token FROM fencing WHERE tenant = %s AND run_id = %s", (tenant, run_id)
    ).fetchone()
    if row is not None and int(row["token"]) == token:
        return None  # the usual case, the same lease again: nothing to write
    # The row lock this takes serialises hosts raising the same run's token at once.
    row = db.execute(
        "INSERT INTO fencing (tenant, run_id, token, update_time_ns) VALUES (%s, %s, %s, %s)"
        " ON CONFLICT (tenant, run_id) DO UPDATE SET token = GREATEST(fencing.token, excluded.token),"
        " update_time_ns = excluded.update_time_ns RETURNING token",
        (tenant, run_id, token, now),
    ).fetchone()
    assert row is not None
    seen = int(row["token"])
    return seen if seen > token else None
