"""Retention (DESIGN R8.4): ended runs older than their tenant's age lose their events, signals,
checkpoints and payloads; the run row stays as a tombstone (``pruned_ms`` set, input and output
blanked, payload references cleared).

Safe with several replicas and with ``agentrt prune`` running beside a server: each batch is one
short transaction that first marks its runs pruned (``UPDATE ... WHERE pruned_ms IS NULL``; on
PostgreSQL the candidates are locked ``FOR UPDATE SKIP LOCKED`` just before), so a run is pruned
by exactly one of them and no transaction holds locks for longer than a batch. On SQLite the
batch starts with that write, which takes the write lock before anything is read, so a batch
never fails on a stale read snapshot. Idempotent: a
pruned run is never selected again. Payload files are deleted after their rows are committed
gone, and only when their path resolves inside the payload directory.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, delete, func, or_, select, true, update

from agentrt.server.core import TERMINAL_PHASES, RetentionPolicy
from agentrt.server.store._db import Database
from agentrt.server.store._schema import checkpoints, events, payloads, runs, signals

__all__ = ["PruneCounts", "PruneReport", "Pruner"]

log = logging.getLogger("agentrt.retention")

_TERMINAL = sorted(p.value for p in TERMINAL_PHASES)
_FILE_PREFIX = "file:"


@dataclass(frozen=True, slots=True)
class PruneCounts:
    """What pruning removed (or, in a dry run, would remove)."""

    runs: int = 0
    events: int = 0
    signals: int = 0
    checkpoints: int = 0
    payloads: int = 0
    payload_bytes: int = 0

    def __add__(self, other: PruneCounts) -> PruneCounts:
        return PruneCounts(
            runs=self.runs + other.runs,
            events=self.events + other.events,
            signals=self.signals + other.signals,
            checkpoints=self.checkpoints + other.checkpoints,
            payloads=self.payloads + other.payloads,
            payload_bytes=self.payload_bytes + other.payload_bytes,
        )


@dataclass(slots=True)
class PruneReport:
    """One pruning pass, per tenant.

    Attributes:
        dry_run: Nothing was changed; the counts say what a real pass would remove.
        now_ms: The instant ages were measured from.
        tenants: Tenant -> counts, for tenants with something to prune.
        files_deleted: Payload files removed from the payload directory.
        files_refused: Payload rows whose file location resolves outside the payload directory;
            the row is gone, the file is left alone and logged.
    """

    dry_run: bool
    now_ms: int
    tenants: dict[str, PruneCounts] = field(default_factory=dict)
    files_deleted: int = 0
    files_refused: int = 0

    @property
    def total(self) -> PruneCounts:
        """The counts of all tenants together."""
        total = PruneCounts()
        for counts in self.tenants.values():
            total += counts
        return total

    def _add(self, tenant: str, counts: PruneCounts) -> None:
        self.tenants[tenant] = self.tenants.get(tenant, PruneCounts()) + counts


@dataclass(frozen=True, slots=True)
class _Scope:
    """Runs of some tenants, ended before ``cutoff_ms``."""

    where: ColumnElement[bool]
    cutoff_ms: int


@dataclass(slots=True)
class _Batch:
    selected: int
    counts: dict[str, PruneCounts]
    files: list[str]
    last_key: tuple[int, str] | None = None


class Pruner:
    """Prunes ended runs of one database by a :class:`~agentrt.server.core.RetentionPolicy`.

    Args:
        db: The store's database.
        policy: Ages per tenant.
        batch_size: Runs per transaction.
        payload_dir: Directory of file payloads (``data_dir/payloads``); None deletes no files.
        fault_point: Test facility (the engine's ``FaultPlan.hit``): called at
            ``retention_before_commit`` (a batch's deletes are done, not committed) and
            ``retention_after_commit`` (committed, its payload files not yet deleted).
    """

    def __init__(
        self,
        db: Database,
        *,
        policy: RetentionPolicy,
        batch_size: int,
        payload_dir: Path | None,
        fault_point: Callable[[str], None] | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.db = db
        self.policy = policy
        self.batch_size = batch_size
        self.payload_dir = payload_dir
        self._hit = fault_point or (lambda _point: None)

    def _scopes(self, now_ms: int) -> list[_Scope]:
        scopes: list[_Scope] = []
        for tenant in sorted(self.policy.per_tenant):
            cut = self.policy.cutoff_ms(tenant, now_ms=now_ms)
            if cut is not None:
                scopes.append(_Scope(runs.c.tenant_id == tenant, cut))
        default = self.policy.default_cutoff_ms(now_ms=now_ms)
        if default is not None:
            named = sorted(self.policy.per_tenant)
            where = runs.c.tenant_id.not_in(named) if named else true()
            scopes.append(_Scope(where, default))
        return scopes

    async def prune(self, *, now_ms: int, dry_run: bool = False) -> PruneReport:
        """Prune every prunable run, batch by batch.

        Args:
            now_ms: Epoch ms ages are measured from (the caller's clock).
            dry_run: Count what would be pruned; change nothing.

        Returns:
            The counts per tenant.
        """
        report = PruneReport(dry_run=dry_run, now_ms=now_ms)
        for scope in self._scopes(now_ms):
            after: tuple[int, str] | None = None
            while True:
                if dry_run:
                    batch = await self.db.transaction(partial(self._measure_batch, scope=scope, after=after))
                else:
                    batch = await self.db.transaction(partial(self._prune_batch, scope=scope, now_ms=now_ms))
                    self._hit("retention_after_commit")
                    self._delete_files(batch.files, report)
                for tenant, counts in batch.counts.items():
                    report._add(tenant, counts)
                if batch.selected < self.batch_size:
                    break
                after = batch.last_key
        if not dry_run and report.tenants:
            total = report.total
            log.info(
                "retention pruned %d runs (%d events, %d payloads) of %d tenants",
                total.runs,
                total.events,
                total.payloads,
                len(report.tenants),
            )
        return report

    def _candidates(self, scope: _Scope) -> Any:
        return and_(
            scope.where,
            runs.c.phase.in_(_TERMINAL),
            runs.c.updated_ms <= scope.cutoff_ms,
            runs.c.pruned_ms.is_(None),
            # Ended, but not done with: a person must look at it (a write nobody can tell), or the
            # cleanup job still retries a release. Its record is what they work from: kept.
            runs.c.needs_attention.is_not(True),
            or_(runs.c.cleanup_status.is_(None), runs.c.cleanup_status != "UNKNOWN"),
        )

    def _measure_batch(self, conn: Connection, scope: _Scope, after: tuple[int, str] | None) -> _Batch:
        query = select(runs.c.run_id, runs.c.tenant_id, runs.c.updated_ms).where(self._candidates(scope))
        if after is not None:
            query = query.where(
                (runs.c.updated_ms > after[0]) | and_(runs.c.updated_ms == after[0], runs.c.run_id > after[1])
            )
        rows = conn.execute(query.order_by(runs.c.updated_ms, runs.c.run_id).limit(self.batch_size)).all()
        tenants = {r.run_id: r.tenant_id for r in rows}
        counts, files = _measure(conn, tenants)
        last = (int(rows[-1].updated_ms), str(rows[-1].run_id)) if rows else None
        return _Batch(len(rows), counts, files, last)

    def _prune_batch(self, conn: Connection, scope: _Scope, now_ms: int) -> _Batch:
        picked = (
            select(runs.c.run_id)
            .where(self._candidates(scope))
            .order_by(runs.c.updated_ms, runs.c.run_id)
            .limit(self.batch_size)
        )
        if conn.dialect.name == "postgresql":
            # Locked first, on its own: inside the UPDATE, PostgreSQL may rescan a LIMIT subquery
            # and mark more than a batch.
            chosen: Any = list(conn.execute(picked.with_for_update(skip_locked=True)).scalars())
        else:
            # The write comes first, so SQLite's write lock is taken before anything is read.
            chosen = picked.scalar_subquery()
        marked = conn.execute(
            update(runs)
            .where(runs.c.run_id.in_(chosen), runs.c.pruned_ms.is_(None))
            .values(
                pruned_ms=now_ms,
                input="",
                output="",
                input_ref=None,
                output_ref=None,
                pending_approval=None,
                variables=None,
            )
            .returning(runs.c.run_id, runs.c.tenant_id)
            .execution_options(synchronize_session=False)
        ).all()
        tenants = {r.run_id: r.tenant_id for r in marked}
        counts, files = _measure(conn, tenants)
        ids = sorted(tenants)
        for chunk in _chunks(ids, 500):
            for table in (events, signals, checkpoints, payloads):
                conn.execute(delete(table).where(table.c.run_id.in_(chunk)))
        # A file another run's payload row still names (a store that shares files by content)
        # stays.
        shared: set[str] = set()
        for chunk in _chunks(sorted(set(files)), 500):
            shared.update(
                conn.execute(select(payloads.c.location).where(payloads.c.location.in_(chunk))).scalars()
            )
        self._hit("retention_before_commit")
        return _Batch(len(marked), counts, sorted(set(files) - shared))

    def _delete_files(self, locations: Iterable[str], report: PruneReport) -> None:
        if self.payload_dir is None:
            return
        base = self.payload_dir.resolve()
        for location in locations:
            target = _inside(base, location.removeprefix(_FILE_PREFIX))
            if target is None:
                report.files_refused += 1
                log.warning("retention: payload location outside %s left alone (%.80r)", base, location)
                continue
            try:
                target.unlink(missing_ok=True)
            except OSError as exc:  # the row is gone; a leftover file is only wasted space
                log.warning("retention: cannot delete payload file %s: %s", target, exc.strerror)
                continue
            report.files_deleted += 1


def _inside(base: Path, relative: str) -> Path | None:
    """``base / relative`` resolved (symlinks followed), or None unless strictly inside ``base``."""
    if not relative or "\x00" in relative:
        return None
    try:
        target = (base / relative).resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    if target == base or not target.is_relative_to(base):
        return None
    return target


def _chunks(items: Sequence[str], size: int) -> Iterable[list[str]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def _measure(conn: Connection, tenants: dict[str, str]) -> tuple[dict[str, PruneCounts], list[str]]:
    """Counts per tenant of the rows the runs ``tenants`` (run id -> tenant) own, and their file payloads."""
    per_run: dict[str, PruneCounts] = {run_id: PruneCounts(runs=1) for run_id in tenants}
    files: list[str] = []

    def add(run_id: str, **counts: int) -> None:
        per_run[run_id] = replace(per_run[run_id], **counts)

    for chunk in _chunks(sorted(tenants), 500):
        for table, name in ((events, "events"), (signals, "signals"), (checkpoints, "checkpoints")):
            grouped = select(table.c.run_id, func.count()).where(table.c.run_id.in_(chunk))
            for run_id, count in conn.execute(grouped.group_by(table.c.run_id)):
                add(run_id, **{name: int(count)})
        query = select(payloads.c.run_id, func.count(), func.coalesce(func.sum(payloads.c.size_bytes), 0))
        query = query.where(payloads.c.run_id.in_(chunk)).group_by(payloads.c.run_id)
        for run_id, count, size in conn.execute(query):
            add(run_id, payloads=int(count), payload_bytes=int(size))
        located = select(payloads.c.location).where(
            payloads.c.run_id.in_(chunk), payloads.c.location.startswith(_FILE_PREFIX)
        )
        files.extend(str(loc) for loc in conn.execute(located).scalars())
    by_tenant: dict[str, PruneCounts] = {}
    for run_id, counts in per_run.items():
        tenant = tenants[run_id]
        by_tenant[tenant] = by_tenant.get(tenant, PruneCounts()) + counts
    return by_tenant, files
