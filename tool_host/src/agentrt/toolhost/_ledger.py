"""The operation ledger (R5.4): one SQLite row per idempotency key, plus fencing tokens (R3.3).

The ledger is synchronous and meant to be called from the host's event loop
thread only: each method is one short transaction, and keeping them off other
threads makes "look up, then record RUNNING" atomic within the process without
locks. ``BEGIN IMMEDIATE`` keeps it atomic against another process on the same file.

A call costs two write transactions, the floor for "RUNNING is durable before the
tool runs, the outcome after": :meth:`Ledger.begin` checks the fencing token and
records RUNNING in one, :meth:`Ledger.finish` records the outcome in the other. A
read-only idempotent call costs one: nothing is lost if it dies unrecorded (it is
simply run again), so only its outcome is written, by :meth:`Ledger.record_read`.
In the usual case each is a single statement, which SQLite runs as its own
transaction, write-locked from its start just like ``BEGIN IMMEDIATE``. The count of
statements matters: each one releases and retakes the GIL, which gRPC's threads also want.

Which host process life started a RUNNING entry is stored as ``owner`` (a fresh
id per start): RUNNING with another owner means the host died while the tool ran.
Hosts of a pool share a PostgreSQL ledger instead (``_ledger_pg``), behind the same
interface (``_ledger_backend``) and the same decision (``_ledger_verdict``).

Keys and fencing tokens are scoped by tenant (the one a call grant names): a key of
one tenant neither collides with nor reveals another's, and a run's fencing token is
remembered per (tenant, run). With a :class:`~agentrt.toolhost._cipher.PayloadCipher` the
outcome columns are sealed (``_ledger_codec``).
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from agentrt.toolhost._cipher import PayloadCipher
from agentrt.toolhost._errors import ErrorCode
from agentrt.toolhost._ledger_codec import LedgerCodec
from agentrt.toolhost._ledger_retention import LedgerPruneCounts, prune_ledger
from agentrt.toolhost._ledger_schema import open_schema
from agentrt.toolhost._ledger_types import (
    Busy,
    Conflict,
    Decision,
    Fenced,
    InFlight,
    LedgerUnavailable,
    OperationRecord,
    OperationStatus,
    OutcomeUnknown,
    ReadCall,
    Replay,
    Start,
    sealing_aad,
)
from agentrt.toolhost._ledger_verdict import Verdict, decision_of, rerun_record, verdict_on
from agentrt.toolhost._outcome import Outcome

__all__ = [
    "Busy",
    "Conflict",
    "Decision",
    "Fenced",
    "InFlight",
    "Ledger",
    "LedgerUnavailable",
    "OperationRecord",
    "OperationStatus",
    "OutcomeUnknown",
    "ReadCall",
    "Replay",
    "Start",
    "sealing_aad",
]


_INSERT_RUNNING = (
    "INSERT INTO operations (tenant, idempotency_key, tool, input_hash, run_id, call_id, status,"
    " owner, executions, create_time_ns, update_time_ns)"
)
_INSERT_IF_NEW = (
    _INSERT_RUNNING
    + " VALUES (?, ?, ?, ?, ?, ?, 'RUNNING', ?, 1, ?, ?) ON CONFLICT (tenant, idempotency_key) DO NOTHING"
)
# The WHERE also keeps "INSERT ... SELECT ... ON CONFLICT" unambiguous for SQLite's parser.
_INSERT_IF_NEW_AND_NOT_FENCED = (
    _INSERT_RUNNING + " SELECT ?, ?, ?, ?, ?, ?, 'RUNNING', ?, 1, ?, ?"
    " WHERE NOT EXISTS (SELECT 1 FROM fencing WHERE tenant = ? AND run_id = ? AND token > ?)"
    " ON CONFLICT (tenant, idempotency_key) DO NOTHING"
)
_SELECT = "SELECT * FROM operations WHERE tenant = ? AND idempotency_key = ?"
_FINISH = (
    "UPDATE operations SET status = ?, result_json = ?, error_code = ?, error_message = ?,"
    " error_details_json = ?, update_time_ns = ? WHERE tenant = ? AND idempotency_key = ? AND owner = ?"
)
_SETTLE_ORPHAN = (
    "UPDATE operations SET status = ?, result_json = ?, error_code = ?, error_message = ?,"
    " error_details_json = ?, update_time_ns = ? WHERE tenant = ? AND idempotency_key = ?"
    " AND status = 'RUNNING' AND owner != ?"
)


_RUN_AGAIN = (
    "UPDATE operations SET status = 'RUNNING', result_json = NULL, error_code = NULL,"
    " error_message = NULL, error_details_json = NULL, owner = ?, run_id = ?, call_id = ?,"
    " executions = executions + 1, update_time_ns = ? WHERE tenant = ? AND idempotency_key = ?"
)


# A write the host stopped where it stood ("effect unknown"), settled later by its tool's own word;
# only the very entry that was examined (same update time) is replaced.
_SETTLE_UNSURE = (
    "UPDATE operations SET status = ?, result_json = ?, error_code = ?, error_message = ?,"
    " error_details_json = ?, update_time_ns = ? WHERE tenant = ? AND idempotency_key = ?"
    " AND status = 'FAILED' AND update_time_ns = ?"
)


# A read-only idempotent call writes its entry once, finished: a new key, or over an entry of the same
# call that a retry may run again (a retryable failure, or RUNNING left by an earlier version's host).
# A final outcome stays as it is (the first one recorded wins), and so does another call's entry.
_RETRYABLE_CODES = ", ".join(f"'{code.value}'" for code in ErrorCode if code.retryable)
_RECORD_READ = (
    "INSERT INTO operations (tenant, idempotency_key, tool, input_hash, run_id, call_id, status,"
    " result_json, error_code, error_message, error_details_json, owner, executions, create_time_ns,"
    " update_time_ns) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)"
    " ON CONFLICT (tenant, idempotency_key) DO UPDATE SET status = excluded.status,"
    " result_json = excluded.result_json, error_code = excluded.error_code,"
    " error_message = excluded.error_message, error_details_json = excluded.error_details_json,"
    " owner = excluded.owner, run_id = excluded.run_id, call_id = excluded.call_id,"
    " executions = operations.executions + 1, update_time_ns = excluded.update_time_ns"
    " WHERE operations.tool = excluded.tool AND operations.input_hash = excluded.input_hash"
    f" AND (operations.status = 'RUNNING' OR operations.error_code IN ({_RETRYABLE_CODES}))"
)


def record_read_params(
    codec: LedgerCodec, read: ReadCall, outcome: Outcome, *, owner: str, now_ns: int
) -> tuple[object, ...]:
    """The parameters of :data:`_RECORD_READ` (both backends)."""
    columns = codec.outcome_columns(read.tenant, read.idempotency_key, outcome)
    return (
        read.tenant,
        read.idempotency_key,
        read.tool,
        read.input_hash,
        read.run_id,
        read.call_id,
        *columns,
        owner,
        read.start_time_ns,
        now_ns,
    )


# Runs whose remembered token this process knows; beyond this many it forgets them all.
_MAX_KNOWN_FENCES = 10_000


class Ledger:
    """The SQLite operation ledger of one host.

    Args:
        path: The database file (created with its directory if missing; migrated if older).
        owner: Id of this host process life.
        cipher: Seals the outcome columns when given; values written without one still read.

    Raises:
        LedgerVersionError: The file was written by a newer tool host.
        sqlite3.Error: The file cannot be opened.
    """

    def __init__(self, path: Path, *, owner: str, cipher: PayloadCipher | None = None) -> None:
        self.path = path
        self.owner = owner
        self._codec = LedgerCodec(cipher)
        path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: we issue BEGIN ourselves; check_same_thread stays on, see module doc.
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            # WAL + NORMAL survives a crash of the process (the failure R5.3 recovers from);
            # only an OS crash or power loss may drop the last commits.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA busy_timeout=5000")
            open_schema(self._db)
        except BaseException:
            self._db.close()
            raise
        self._closed = False
        # (tenant, run_id) -> the fencing token the table holds for it, as far as this process
        # knows: the table holds at least that (tokens only grow). Only lets begin() skip
        # remembering it.
        self._known_fences: dict[tuple[str, str], int] = {}

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    def close(self) -> None:
        """Close the database; later calls fail."""
        if not self._closed:
            self._closed = True
            self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def transaction(self, *, lock_key: str = "") -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction on the ledger's connection (the intent claims use it).

        ``BEGIN IMMEDIATE`` write-locks the whole file, so ``lock_key`` (what a shared ledger locks
        on) is not needed here.
        """
        return self._transaction()

    def is_orphan(self, record: OperationRecord) -> bool:
        """True when ``record`` is RUNNING under an earlier, dead life of this host."""
        return record.status is OperationStatus.RUNNING and record.owner != self.owner

    def prune(self, cutoff_ns: int) -> LedgerPruneCounts:
        """One retention pass (see ``_ledger_retention``), on a connection of its own: any thread."""
        return prune_ledger(self.path, cutoff_ns=cutoff_ns)

    @property
    def description(self) -> str:
        """Where the ledger lives, for log lines."""
        return str(self.path)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def get(self, idempotency_key: str, *, tenant: str = "") -> OperationRecord | None:
        """Return the entry of a key in ``tenant``, or None."""
        row = self._db.execute(_SELECT, (tenant, idempotency_key)).fetchone()
        return self._record(row) if row is not None else None

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
        """Decide what to do with a call, recording RUNNING when it is to run.

        Args:
            idempotency_key: The call's key, unique within ``tenant``.
            tool: Tool name.
            input_hash: sha256 of the canonical arguments.
            run_id: Run that made the call.
            call_id: Call id within the run.
            rerun_after_crash: The tool is idempotent or read-only, so an entry left
                RUNNING by a dead host may run again.
            fencing_token: The caller's fencing token; when given (and ``run_id`` is not
                empty) it is checked and remembered first, as :meth:`check_fence` does,
                in the same transaction.
            tenant: The tenant the call acts for; keys and fences are per tenant.

        Returns:
            :class:`Start` (recorded RUNNING), :class:`Replay`, :class:`Conflict`,
            :class:`InFlight`, :class:`OutcomeUnknown`, or :class:`Fenced` (nothing recorded).
        """
        now = time.time_ns()
        token = fencing_token if run_id else None
        fence = (tenant, run_id)
        if not self._db.in_transaction and (token is None or self._known_fences.get(fence) == token):
            # The usual call, a new key under a token already remembered, in one statement.
            # Any other call inserts nothing here and takes the full path below.
            values = (tenant, idempotency_key, tool, input_hash, run_id, call_id, self.owner, now, now)
            if token is not None:
                cursor = self._db.execute(_INSERT_IF_NEW_AND_NOT_FENCED, (*values, tenant, run_id, token))
            else:
                cursor = self._db.execute(_INSERT_IF_NEW, values)
            if cursor.rowcount == 1:
                return Start(
                    self._new_record(tenant, idempotency_key, tool, input_hash, run_id, call_id, now)
                )
        with self._transaction() as db:
            if token is not None:
                higher = self._fence(db, tenant, run_id, token, now)
                if higher is not None:
                    return Fenced(higher)
            decision = self._decide(
                db,
                tenant=tenant,
                idempotency_key=idempotency_key,
                tool=tool,
                input_hash=input_hash,
                run_id=run_id,
                call_id=call_id,
                rerun_after_crash=rerun_after_crash,
                now=now,
            )
        if token is not None:
            self._know_fence(fence, token)
        return decision

    def _decide(
        self,
        db: sqlite3.Connection,
        *,
        tenant: str,
        idempotency_key: str,
        tool: str,
        input_hash: str,
        run_id: str,
        call_id: str,
        rerun_after_crash: bool,
        now: int,
    ) -> Decision:
        row = db.execute(_SELECT, (tenant, idempotency_key)).fetchone()
        if row is None:
            db.execute(
                _INSERT_RUNNING + " VALUES (?, ?, ?, ?, ?, ?, 'RUNNING', ?, 1, ?, ?)",
                (tenant, idempotency_key, tool, input_hash, run_id, call_id, self.owner, now, now),
            )
            return Start(self._new_record(tenant, idempotency_key, tool, input_hash, run_id, call_id, now))
        record = self._record(row)
        # One host per file: a RUNNING entry of another owner was left by an earlier, dead life.
        verdict = verdict_on(
            record,
            tool=tool,
            input_hash=input_hash,
            me=self.owner,
            record_owner_alive=False,
            rerun_after_crash=rerun_after_crash,
        )
        if verdict is not Verdict.RUN_AGAIN:
            decision = decision_of(verdict, record)
            assert decision is not None
            return decision
        # A retryable failure, or a safe call orphaned by a dead host: run it again.
        db.execute(_RUN_AGAIN, (self.owner, run_id, call_id, now, tenant, idempotency_key))
        return rerun_record(record, owner=self.owner, run_id=run_id, call_id=call_id, now_ns=now)

    def _new_record(
        self,
        tenant: str,
        idempotency_key: str,
        tool: str,
        input_hash: str,
        run_id: str,
        call_id: str,
        now: int,
    ) -> OperationRecord:
        # Exactly the row just inserted; reading it back would cost a query per call.
        return OperationRecord(
            tenant=tenant,
            idempotency_key=idempotency_key,
            tool=tool,
            input_hash=input_hash,
            run_id=run_id,
            call_id=call_id,
            status=OperationStatus.RUNNING,
            outcome=None,
            owner=self.owner,
            executions=1,
            create_time_ns=now,
            update_time_ns=now,
        )

    def finish(self, idempotency_key: str, outcome: Outcome, *, tenant: str = "") -> None:
        """Record the outcome of a call this process started."""
        params = self._outcome_params(tenant, idempotency_key, outcome)
        if self._db.in_transaction:
            # Never, unless an earlier COMMIT failed; then BEGIN fails here as it always did.
            with self._transaction() as db:
                db.execute(_FINISH, params)
        else:
            # One statement: its own transaction.
            self._db.execute(_FINISH, params)

    def _outcome_params(self, tenant: str, idempotency_key: str, outcome: Outcome) -> tuple[object, ...]:
        columns = self._codec.outcome_columns(tenant, idempotency_key, outcome)
        return (*columns, time.time_ns(), tenant, idempotency_key, self.owner)

    def record_read(self, read: ReadCall, outcome: Outcome) -> None:
        """Record the outcome of a read-only idempotent call, which recorded no RUNNING (one write)."""
        params = record_read_params(self._codec, read, outcome, owner=self.owner, now_ns=time.time_ns())
        if self._db.in_transaction:
            with self._transaction() as db:  # only after a failed COMMIT, as in finish()
                db.execute(_RECORD_READ, params)
        else:
            self._db.execute(_RECORD_READ, params)

    def settle_orphan(self, idempotency_key: str, outcome: Outcome, *, tenant: str = "") -> None:
        """Record the outcome of a call an earlier host life left RUNNING, as its tool reported it."""
        params = self._outcome_params(tenant, idempotency_key, outcome)
        with self._transaction() as db:
            db.execute(_SETTLE_ORPHAN, params)

    def settle_unsure(self, record: OperationRecord, outcome: Outcome) -> None:
        """Replace a recorded "stopped where it stood, effect unknown" with what its tool reported."""
        params = self._outcome_params(record.tenant, record.idempotency_key, outcome)
        with self._transaction() as db:
            db.execute(_SETTLE_UNSURE, (*params[:-1], record.update_time_ns))

    def check_fence(self, run_id: str, token: int, *, tenant: str = "") -> int | None:
        """Remember the highest fencing token per (tenant, run) and refuse older ones.

        Args:
            run_id: The run.
            token: The caller's fencing token (the run's lease generation).
            tenant: The run's tenant.

        Returns:
            None when the call may proceed, else the higher token already seen.
        """
        with self._transaction() as db:
            higher = self._fence(db, tenant, run_id, token, time.time_ns())
        if higher is None:
            self._know_fence((tenant, run_id), token)
        return higher

    def _know_fence(self, fence: tuple[str, str], token: int) -> None:
        """Note, after a commit, that the table holds ``token`` for the (tenant, run) ``fence``."""
        if len(self._known_fences) >= _MAX_KNOWN_FENCES and fence not in self._known_fences:
            self._known_fences.clear()
        self._known_fences[fence] = token

    @staticmethod
    def _fence(db: sqlite3.Connection, tenant: str, run_id: str, token: int, now: int) -> int | None:
        row = db.execute(
            "SELECT token FROM fencing WHERE tenant = ? AND run_id = ?", (tenant, run_id)
        ).fetchone()
        if row is not None:
            seen = int(row["token"])
            if seen > token:
                return seen
            if seen == token:
                # The usual case, the same lease again: nothing to write.
                return None
        db.execute(
            "INSERT INTO fencing (tenant, run_id, token, update_time_ns) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (tenant, run_id) DO UPDATE SET token = excluded.token,"
            " update_time_ns = excluded.update_time_ns WHERE excluded.token > fencing.token",
            (tenant, run_id, token, now),
        )
        return None

    def _record(self, row: sqlite3.Row) -> OperationRecord:
        return self._codec.record(row)
