"""The run store: runs, their append-only event logs, checkpoints, leases.

Every state change goes through :meth:`Store.append`, which appends events and
advances the run row (``revision + 1``) in one transaction fenced by
``revision`` and ``lease_owner`` (R5.1, R5.5). Appends from concurrent runs are
group-committed: one transaction carries every append queued while the previous
one was committing, so at high concurrency the cost per step falls below one
commit while each caller still waits for its own durable commit.

With a cipher, payloads are sealed before they are queued and opened as they are read
(``_crypt.py``): callers only ever see plaintext records.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import (
    BigInteger,
    Connection,
    Integer,
    and_,
    bindparam,
    func,
    insert,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.exc import IntegrityError

from agentrt.server.core import ACTIVE_PHASES, TERMINAL_PHASES, LeaseLost, QueuedSignal
from agentrt.server.store._admission import Admission, TenantTurns
from agentrt.server.store._appends import write_batch
from agentrt.server.store._checkpoints import Checkpoints, StoredCheckpoint
from agentrt.server.store._claims import CLEANUPS, RUNS, RUNS_AMONG
from agentrt.server.store._commits import TypedCommits
from agentrt.server.store._crypt import RecordCipher
from agentrt.server.store._db import Database, MigrateMode, PostgresDatabase, open_database
from agentrt.server.store._fast_sql import driver_statement, insert_events, insert_run, run_row

if TYPE_CHECKING:
    from agentrt.server.store._pg_appends import PgAppender
    from agentrt.server.store._pg_reads import PgReader

from agentrt.server.store._payloads import PayloadStore
from agentrt.server.store._records import Claim, RunRecord, Signal, StoredEvent
from agentrt.server.store._replay import EventPage, read_page, read_run
from agentrt.server.store._schema import events, runs, signals
from agentrt.server.store._signal_codec import encode_signal
from agentrt.toolhost.security import PayloadCipher

_TERMINAL = [p.value for p in TERMINAL_PHASES]

# The per-run reads, built once and run as driver SQL (``_fast_sql``; issue 19).
_BY_REQUEST_KEY = select(runs).where(
    runs.c.tenant_id == bindparam("tenant_id"), runs.c.request_key == bindparam("request_key")
)
_EVENTS_AFTER = (
    select(events)
    .where(events.c.run_id == bindparam("run_id"), events.c.seq > bindparam("after_seq", type_=BigInteger))
    .order_by(events.c.seq)
    .limit(bindparam("limit", type_=Integer))
)


@dataclass(slots=True)
class _PendingAppend:
    run_id: str
    expected_revision: int
    owner: str
    rows: list[dict[str, Any]]
    values: dict[str, Any]
    future: asyncio.Future[int]
    consume_signals: Sequence[int] = ()


class Store(TypedCommits):
    """Async facade over one database. Create with :meth:`open`."""

    def __init__(self, db: Database, *, cipher: PayloadCipher | None = None):
        self.db = db
        self._crypt = RecordCipher(cipher=cipher)
        self._pg: PgAppender | None = None
        self._pg_reads: PgReader | None = None
        if isinstance(db, PostgresDatabase):  # psycopg is imported on PostgreSQL only
            from agentrt.server.store._pg_appends import PgAppender
            from agentrt.server.store._pg_reads import PgReader

            self._pg = PgAppender(db.url)
            self._pg_reads = PgReader(db.url, crypt=self._crypt)
        self._pending: list[_PendingAppend] = []
        self._flusher: asyncio.Task[None] | None = None
        self._checkpoints = Checkpoints(db, self._crypt)
        self._admissions = TenantTurns()

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        migrate: MigrateMode = "auto",
        sqlite_synchronous: str = "FULL",
        pool_size: int = 10,
        cipher: PayloadCipher | None = None,
    ) -> Store:
        """Prepare the schema (``migrate``: see :func:`open_database`) and connect.

        Args:
            url: ``sqlite:///...`` or ``postgresql://...``.
            migrate: ``auto`` upgrades the schema, ``check`` raises SchemaNotCurrent unless it is
                at head, ``off`` leaves it alone.
            sqlite_synchronous: SQLite's ``PRAGMA synchronous``.
            pool_size: PostgreSQL connection pool size.
            cipher: Seals run payloads at rest (R10.2); None stores them in clear. Values written
                in clear before it was set still read.
        """
        database = open_database(
            url, migrate=migrate, sqlite_synchronous=sqlite_synchronous, pool_size=pool_size
        )
        store = cls(database, cipher=cipher)
        await store._connect_fast_paths()
        return store

    async def _connect_fast_paths(self) -> None:
        # Connected now, not by the first follower or commit: their first answer would wait for it.
        # Best effort: one that cannot connect yet is connected by its first use.
        for path in (self._pg, self._pg_reads):
            if path is not None:
                with contextlib.suppress(Exception):
                    await path.connect()

    @property
    def dialect(self) -> str:
        return self.db.dialect

    def payload_store(self, *, mode: Literal["db", "file"] = "db", root: Path | None = None) -> PayloadStore:
        """Payloads of this store's runs, sealed with its cipher (``file``: under ``root``)."""
        return PayloadStore(db=self.db, crypt=self._crypt, mode=mode, root=root)

    async def close(self) -> None:
        if self._flusher is not None:
            await asyncio.shield(self._flusher)
        if self._pg is not None:
            await self._pg.close()
        if self._pg_reads is not None:
            await self._pg_reads.close()
        await self.db.dispose()

    # -- runs ---------------------------------------------------------------------------------------

    async def create_run(
        self,
        values: Mapping[str, Any],
        first_events: Sequence[tuple[str, str]],
        now_ms: int,
        *,
        admission: Admission | None = None,
    ) -> tuple[RunRecord, bool]:
        """Insert a run and its first events; with a repeated request_key return the existing run.

        Args:
            admission: Limits a new run must fit in, counted in the inserting transaction (a
                repeated request_key is never refused).

        Returns:
            The run and whether this call created it.

        Raises:
            OverLimit: Over an admission limit; nothing was written.
        """

        def existing(conn: Connection) -> RunRecord | None:
            if not values.get("request_key"):
                return None
            key = {"tenant_id": values["tenant_id"], "request_key": values["request_key"]}
            row = driver_statement(_BY_REQUEST_KEY, conn.dialect).execute(conn, key).first()
            return crypt.run(run_row(row)) if row else None

        crypt = self._crypt
        run_id = values["run_id"]
        row = dict(values, revision=1, last_seq=len(first_events), created_ms=now_ms, updated_ms=now_ms)
        sealed_row = crypt.seal_run_values(run_id, row)
        event_rows = [
            {
                "run_id": run_id,
                "seq": i,
                "type": t,
                "payload": crypt.seal_event(run_id, i, p),
                "created_ms": now_ms,
            }
            for i, (t, p) in enumerate(first_events, start=1)
        ]

        def write(conn: Connection) -> tuple[RunRecord, bool]:
            if admission is not None:
                admission.lock(conn)
            found = existing(conn)
            if found is not None:
                return found, False
            if admission is not None:
                admission.check(conn)
            # Driver SQL compiled once per column set (``_fast_sql``): no statement built per run.
            insert_run(conn, sealed_row)
            insert_events(conn, event_rows)
            # Every column is known here; reading the row back would cost a round trip.
            known = {c.name: None for c in runs.c} | row
            return RunRecord(**known), True

        try:
            if admission is not None and self.db.dialect == "postgresql":
                async with self._admissions.turn(admission.tenant_id):
                    return await self.db.transaction(write)
            return await self.db.transaction(write)
        except IntegrityError:
            # A concurrent request with the same key won the insert: attach to its run.
            found = await self.db.read(existing)
            if found is None:
                raise
            return found, False

    async def check_admission(self, admission: Admission) -> None:
        """Raise OverLimit when a new run would be over a limit now (reads only)."""
        await self.db.read(admission.check)

    async def find_by_request_key(self, tenant_id: str, request_key: str) -> RunRecord | None:
        """The run a request key started, if any."""

        def read(conn: Connection) -> RunRecord | None:
            query = select(runs).where(runs.c.tenant_id == tenant_id, runs.c.request_key == request_key)
            row = conn.execute(query).first()
            return self._crypt.run(row) if row else None

        return await self.db.read(read)

    async def active_session_run(self, *, tenant_id: str, session_id: str) -> RunRecord | None:
        """The session's oldest run that has not ended, if any."""

        def read(conn: Connection) -> RunRecord | None:
            row = conn.execute(
                select(runs)
                .where(
                    runs.c.tenant_id == tenant_id,
                    runs.c.session_id == session_id,
                    runs.c.phase.not_in(_TERMINAL),
                )
                .order_by(runs.c.created_ms)
                .limit(1)
            ).first()
            # Callers want its id and phase: an unreadable payload must not block the session gate.
            return self._crypt.run(row, strict=False) if row else None

        return await self.db.read(read)

    async def session_turns(self, *, tenant_id: str, session_id: str, limit: int) -> list[RunRecord]:
        """The session's ended runs that have an output, oldest first (at most ``limit``, the newest)."""

        def read(conn: Connection) -> list[RunRecord]:
            query = (
                select(runs)
                .where(
                    runs.c.tenant_id == tenant_id,
                    runs.c.session_id == session_id,
                    runs.c.phase.in_(_TERMINAL),
                    runs.c.output != "",
                )
                .order_by(runs.c.created_ms.desc())
                .limit(limit)
            )
            # Strict: a new turn built on a silently emptied history would be wrong.
            return [self._crypt.run(r) for r in conn.execute(query)][::-1]

        return await self.db.read(read)

    async def get_run(self, run_id: str, *, tenant_id: str | None = None) -> RunRecord | None:
        """The run, or None (also when it belongs to another tenant)."""

        def read(conn: Connection) -> RunRecord | None:
            query = select(runs).where(runs.c.run_id == run_id)
            if tenant_id is not None:
                query = query.where(runs.c.tenant_id == tenant_id)
            row = conn.execute(query).first()
            return self._crypt.run(row) if row else None

        return await self.db.read(read)

    async def list_runs(
        self,
        *,
        tenant_id: str,
        phases: Sequence[str] = (),
        agent_name: str = "",
        session_id: str = "",
        needs_attention: bool = False,
        cleanup_unknown: bool = False,
        page_size: int = 50,
        page_token: str = "",
        fits: Callable[[RunRecord], bool] | None = None,
    ) -> tuple[list[RunRecord], str]:
        """Runs newest first, keyset-paged.

        Args:
            fits: Asked of each run in order; the page ends before the first run it refuses (the
                first run is always kept, so a listing moves on), with a token after the last one
                kept. The API uses it to keep a page within the reply limit.

        Raises:
            ValueError: a malformed token.
        """
        after = _decode_token(page_token) if page_token else None

        def read(conn: Connection) -> list[RunRecord]:
            query = select(runs).where(runs.c.tenant_id == tenant_id)
            if phases:
                query = query.where(runs.c.phase.in_(list(phases)))
            if agent_name:
                query = query.where(runs.c.agent_name == agent_name)
            if session_id:
                query = query.where(runs.c.session_id == session_id)
            if needs_attention:
                query = query.where(runs.c.needs_attention.is_(True))
            if cleanup_unknown:
                query = query.where(runs.c.cleanup_status == "UNKNOWN")
            if after is not None:
                created, run_id = after
                query = query.where(
                    or_(
                        runs.c.created_ms < created,
                        and_(runs.c.created_ms == created, runs.c.run_id < run_id),
                    )
                )
            query = query.order_by(runs.c.created_ms.desc(), runs.c.run_id.desc()).limit(page_size + 1)
            # Lenient: one run whose key is gone must not hide the others from a listing.
            return [self._crypt.run(r, strict=False) for r in conn.execute(query)]

        found = await self.db.read(read)
        page, more = found[:page_size], len(found) > page_size
        if fits is not None:
            for index, record in enumerate(page):
                if not fits(record):
                    kept = max(index, 1)
                    page, more = page[:kept], more or kept < len(page)
                    break
        if not more:
            return page, ""
        last = page[-1]
        return page, _encode_token(last.created_ms, last.run_id)

    async def gauge_counts(self, now_ms: int) -> tuple[dict[str, int], int, int]:
        """Active runs by phase, runs waiting for a worker, and runs needing attention.

        Active phases only, so the ``(phase, lease_expires_ms)`` index bounds the scan by the live
        runs, not by history; the metrics job calls it on an interval and caches the answer.
        """
        active = sorted(p.value for p in ACTIVE_PHASES)
        waiting = [p for p in active if p not in ("WAITING_APPROVAL", "UNKNOWN_OUTCOME")]

        def read(conn: Connection) -> tuple[dict[str, int], int, int]:
            in_active = runs.c.phase.in_(active)
            by_phase = conn.execute(
                select(runs.c.phase, func.count()).where(in_active).group_by(runs.c.phase)
            )
            free = or_(runs.c.lease_owner.is_(None), runs.c.lease_expires_ms < now_ms)
            due = or_(runs.c.wake_ms.is_(None), runs.c.wake_ms <= now_ms)
            queued = select(func.count()).where(runs.c.phase.in_(waiting), free, due)
            attention = select(func.count()).where(in_active, runs.c.needs_attention.is_(True))
            return (
                dict.fromkeys(active, 0) | {str(phase): int(n) for phase, n in by_phase},
                int(conn.execute(queued).scalar_one()),
                int(conn.execute(attention).scalar_one()),
            )

        return await self.db.read(read)

    async def count_runs(self) -> int:
        return await self.db.read(
            lambda c: int(c.execute(select(func.count()).select_from(runs)).scalar_one())
        )

    # -- events -------------------------------------------------------------------------------------

    async def read_events(self, run_id: str, *, after_seq: int = 0, limit: int = 1000) -> list[StoredEvent]:
        """Persisted events with seq > after_seq, in order."""

        params = {"run_id": run_id, "after_seq": after_seq, "limit": limit}

        def read(conn: Connection) -> list[StoredEvent]:
            rows = driver_statement(_EVENTS_AFTER, conn.dialect).execute(conn, params)
            return [self._crypt.event(r) for r in rows]

        return await self.db.read(read)

    async def read_page(self, run_id: str, *, after_seq: int, max_rows: int, max_bytes: int) -> EventPage:
        """A replay page: events after ``after_seq``, bounded in rows and stored bytes (``_replay``)."""
        if self._pg_reads is not None:
            return await self._pg_reads.page(
                run_id, after_seq=after_seq, max_rows=max_rows, max_bytes=max_bytes
            )
        crypt = self._crypt
        return await self.db.read(
            lambda conn: read_page(
                conn, crypt, run_id, after_seq=after_seq, max_rows=max_rows, max_bytes=max_bytes
            )
        )

    async def read_run_and_page(
        self, run_id: str, *, after_seq: int, max_rows: int, max_bytes: int
    ) -> tuple[RunRecord | None, EventPage]:
        """The run's row, then a replay page read after it, in one go (no page without a row)."""
        if self._pg_reads is not None:
            return await self._pg_reads.run_and_page(
                run_id, after_seq=after_seq, max_rows=max_rows, max_bytes=max_bytes
            )
        crypt = self._crypt

        def read(conn: Connection) -> tuple[RunRecord | None, EventPage]:
            record = read_run(conn, crypt, run_id)
            if record is None:
                return None, EventPage([], False)
            page = read_page(conn, crypt, run_id, after_seq=after_seq, max_rows=max_rows, max_bytes=max_bytes)
            return record, page

        return await self.db.read(read)

    async def append(
        self,
        run_id: str,
        *,
        expected_revision: int,
        owner: str,
        first_seq: int,
        new_events: Sequence[tuple[str, str]],
        values: Mapping[str, Any],
        now_ms: int,
        consume_signals: Sequence[int] = (),
    ) -> int:
        """Append events and advance the run row in one fenced transaction.

        ``consume_signals`` are deleted in the same transaction: a signal is applied exactly once.

        Returns:
            The new revision.

        Raises:
            LeaseLost: the run's revision or owner is not what this worker expects.
        """
        # Sealed here, before queuing, so the group commit itself costs what it did in clear.
        crypt = self._crypt
        rows = [
            {
                "run_id": run_id,
                "seq": first_seq + i,
                "type": t,
                "payload": crypt.seal_event(run_id, first_seq + i, p),
                "created_ms": now_ms,
            }
            for i, (t, p) in enumerate(new_events)
        ]
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        row_values = dict(
            crypt.seal_run_values(run_id, values), revision=expected_revision + 1, updated_ms=now_ms
        )
        if rows:
            row_values["last_seq"] = rows[-1]["seq"]
        self._pending.append(
            _PendingAppend(run_id, expected_revision, owner, rows, row_values, future, consume_signals)
        )
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                try:
                    if self._pg is not None and self._pg.handles(batch):
                        fenced = await self._pg.write(batch)
                    else:
                        fenced = await self.db.transaction(lambda conn, b=batch: write_batch(conn, b))  # type: ignore[misc]
                except BaseException as exc:  # one failed transaction fails every caller in it
                    for item in batch:
                        if not item.future.done():
                            item.future.set_exception(
                                exc if isinstance(exc, Exception) else RuntimeError(repr(exc))
                            )
                    if not isinstance(exc, Exception):
                        raise
                    continue
                for item, ok in zip(batch, fenced, strict=True):
                    if item.future.done():
                        continue
                    if ok:
                        item.future.set_result(item.expected_revision + 1)
                    else:
                        item.future.set_exception(
                            LeaseLost(
                                f"run {item.run_id} moved past revision "
                                f"{item.expected_revision} or changed owner",
                                metadata={"run_id": item.run_id},
                            )
                        )
        finally:
            self._flusher = None

    # -- checkpoints --------------------------------------------------------------------------------

    async def write_checkpoint(self, checkpoint: StoredCheckpoint) -> None:
        """Keep ``checkpoint`` as the run's latest (after the commit of its run.checkpointed)."""
        await self._checkpoints.write(checkpoint)

    async def read_checkpoint(self, run_id: str) -> StoredCheckpoint | None:
        """The run's latest checkpoint, or None.

        Raises:
            UnreadableRecord: it is sealed and cannot be opened.
        """
        return await self._checkpoints.latest(run_id)

    # -- leases -------------------------------------------------------------------------------------

    async def claim(
        self, *, owner: str, now_ms: int, ttl_ms: int, limit: int, run_ids: Sequence[str] = ()
    ) -> list[Claim]:
        """Take up to ``limit`` runs that need a worker: unowned or whose lease expired.

        Paused runs (WAITING_APPROVAL, UNKNOWN_OUTCOME) are only taken when a cancel is pending.
        Tenants take turns: every tenant's oldest candidate first, then every tenant's second,
        and so on (``_claims``). Replicas never block on each other or take the same run.
        """
        params: dict[str, Any] = {"now_ms": now_ms, "limit": limit}
        taking = RUNS
        if run_ids:
            params["run_ids"] = list(run_ids)
            taking = RUNS_AMONG
        return await self.db.transaction(
            lambda conn: taking.run(conn, params, owner=owner, expires_ms=now_ms + ttl_ms)
        )

    async def claim_cleanups(self, *, owner: str, now_ms: int, ttl_ms: int, limit: int) -> list[Claim]:
        """Take up to ``limit`` ended runs whose cleanups are UNKNOWN and due for the cleanup job.

        The lease fences the job's appends as it fences a driver's; replicas skip each other's rows.
        """
        params = {"now_ms": now_ms, "limit": limit}
        return await self.db.transaction(
            lambda conn: CLEANUPS.run(conn, params, owner=owner, expires_ms=now_ms + ttl_ms)
        )

    async def renew(
        self, *, owner: str, run_ids: Sequence[str], now_ms: int, ttl_ms: int
    ) -> dict[str, tuple[str, str] | None]:
        """Extend this worker's leases.

        Returns:
            The runs it still owns, each with its pending cancel (reason, requested_by), or None
            when no cancel was asked: a cancel recorded by another replica reaches the owner here.
        """
        if not run_ids:
            return {}

        def write(conn: Connection) -> dict[str, tuple[str, str] | None]:
            rows = conn.execute(
                update(runs)
                .where(runs.c.run_id.in_(list(run_ids)), runs.c.lease_owner == owner)
                .values(lease_expires_ms=now_ms + ttl_ms)
                .returning(
                    runs.c.run_id,
                    runs.c.cancel_requested_ms,
                    runs.c.cancel_reason,
                    runs.c.cancel_requested_by,
                )
            )
            return {r[0]: ((r[2] or "cancelled"), r[3] or "") if r[1] is not None else None for r in rows}

        return await self.db.transaction(write)

    async def repark(
        self, run_id: str, *, owner: str, expected_revision: int, wake_ms: int, reconcile_attempts: int
    ) -> None:
        """Park the run again with nothing new to record: a new wake time, the lease given back.

        No event and no revision: a wait that learned nothing costs one row update, not a commit
        of the log.

        Raises:
            LeaseLost: the run's revision or owner is not what this worker expects.
        """

        def write(conn: Connection) -> int:
            return conn.execute(
                update(runs)
                .where(
                    runs.c.run_id == run_id,
                    runs.c.revision == expected_revision,
                    runs.c.lease_owner == owner,
                )
                .values(
                    wake_ms=wake_ms,
                    reconcile_attempts=reconcile_attempts,
                    lease_owner=None,
                    lease_expires_ms=None,
                )
            ).rowcount

        if await self.db.transaction(write) != 1:
            raise LeaseLost(
                f"run {run_id} moved past revision {expected_revision} or changed owner",
                metadata={"run_id": run_id},
            )

    async def release(self, run_id: str, *, owner: str, generation: int | None = None) -> None:
        """Give up the lease (run ended, paused or handed over); a no-op when another worker owns
        it, or, with ``generation``, when this owner's lease is a later one than the caller's."""
        fence = and_(runs.c.run_id == run_id, runs.c.lease_owner == owner)
        if generation is not None:
            fence = and_(fence, runs.c.lease_generation == generation)
        await self.db.transaction(
            lambda conn: conn.execute(
                update(runs).where(fence).values(lease_owner=None, lease_expires_ms=None)
            )
        )

    async def release_leases(self, *, owner: str, leases: Sequence[tuple[str, int]]) -> None:
        """:meth:`release` of many (run id, generation) pairs in one statement: a drain's last step."""
        if not leases:
            return
        fence = and_(
            runs.c.lease_owner == owner,
            tuple_(runs.c.run_id, runs.c.lease_generation).in_([tuple(lease) for lease in leases]),
        )
        await self.db.transaction(
            lambda conn: conn.execute(
                update(runs).where(fence).values(lease_owner=None, lease_expires_ms=None)
            )
        )

    async def read_signals(self, run_id: str) -> list[Signal]:
        """Queued signals of a run, oldest first."""

        def read(conn: Connection) -> list[Signal]:
            query = select(signals).where(signals.c.run_id == run_id).order_by(signals.c.id)
            return [self._crypt.signal(r) for r in conn.execute(query)]

        return await self.db.read(read)

    async def add_signal(
        self, run_id: str, *, signal: QueuedSignal, now_ms: int, expected_revision: int | None = None
    ) -> bool:
        """Queue a signal for the run's next owner; False when the run moved past ``expected_revision``."""
        kind, payload = encode_signal(signal)
        payload = self._crypt.seal_signal(run_id, kind, payload)

        def write(conn: Connection) -> bool:
            if expected_revision is not None:
                current = conn.execute(select(runs.c.revision).where(runs.c.run_id == run_id)).scalar()
                if current != expected_revision:
                    return False
            conn.execute(insert(signals).values(run_id=run_id, kind=kind, payload=payload, created_ms=now_ms))
            # Wake a parked run at once.
            conn.execute(update(runs).where(runs.c.run_id == run_id).values(wake_ms=None))
            return True

        return await self.db.transaction(write)

    async def request_cancel(
        self, run_id: str, *, tenant_id: str, reason: str, requested_by: str, now_ms: int
    ) -> RunRecord | None:
        """Persist the cancel intent (any replica may call this); None when the run is unknown."""

        def write(conn: Connection) -> RunRecord | None:
            conn.execute(
                update(runs)
                .where(
                    runs.c.run_id == run_id,
                    runs.c.tenant_id == tenant_id,
                    runs.c.phase.not_in(_TERMINAL),
                    runs.c.cancel_requested_ms.is_(None),
                )
                .values(cancel_requested_ms=now_ms, cancel_reason=reason, cancel_requested_by=requested_by)
            )
            row = conn.execute(
                select(runs).where(runs.c.run_id == run_id, runs.c.tenant_id == tenant_id)
            ).first()
            return self._crypt.run(row) if row else None

        return await self.db.transaction(write)


def _encode_token(created_ms: int, run_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([created_ms, run_id]).encode()).decode()


def _decode_token(token: str) -> tuple[int, str]:
    try:
        created, run_id = json.loads(base64.urlsafe_b64decode(token.encode()))
    except Exception as exc:
        raise ValueError("malformed page_token") from exc
    # Range-checked: a huge number must not reach the database (64-bit integers) as a bind value.
    if (
        type(created) is not int
        or not 0 <= created < 2**63
        or not isinstance(run_id, str)
        or len(run_id) > 200
    ):
        raise ValueError("malformed page_token")
    return created, run_id
