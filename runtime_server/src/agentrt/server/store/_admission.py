"""Admission control: how many runs may wait and run, counted in the database (issue 9, §11.8).

The counts live in the ``runs`` table (index ``ix_runs_tenant_phase``), so every replica sees the
same numbers. They are taken inside the transaction that inserts the run, after the request key
was looked up: a repeated key attaches to its run and is never refused, and a refused request
writes nothing.

What is guaranteed under concurrency:

* Per tenant the limits are exact. On PostgreSQL a transaction-scoped advisory lock per tenant
  serialises that tenant's inserts across replicas; under READ COMMITTED the count taken after
  the lock sees every insert committed before it. On SQLite one writer at a time holds the
  database, and the count and the insert run without yielding the event loop.
* The global queue limit is exact on SQLite. On PostgreSQL it is exact once the queue is within
  :data:`GLOBAL_EXACT_WITHIN` runs of the limit, where a global advisory lock is taken too; further
  below, inserts of different tenants run in parallel, and the queue can pass its limit only if
  more than :data:`GLOBAL_EXACT_WITHIN` run-creating transactions are in flight at once (it then
  passes it by at most their number less that margin).
"""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from sqlalchemy import Connection, text

from agentrt.server.core import ACTIVE_PHASES, OverLimit, Phase
from agentrt.server.store._appends import for_paramstyle

__all__ = ["GLOBAL_EXACT_WITHIN", "Admission", "TenantTurns"]

#: Below ``max_queued_runs`` minus this, the global queue count takes no global lock (PostgreSQL).
GLOBAL_EXACT_WITHIN = 64

_LOCK_SPACE = 0x61646D74  # "admt": the first key of every admission advisory lock
_GLOBAL_LOCK = 0x61646D7447  # a single-key lock lives in another key space than two-key ones

# Counts capped at the limit (counting further tells nothing), as driver SQL: building the
# SQLAlchemy expressions cost more than running them. "Not ended" is spelled as the phases that
# are not terminal: ``phase IN (...)`` seeks ix_runs_tenant_phase once per phase, where
# ``NOT IN (terminal)`` walked every run the tenant ever had, ended ones included.
_ACTIVE = ", ".join(f"'{phase.value}'" for phase in sorted(ACTIVE_PHASES))
_QUEUED = f"'{Phase.QUEUED.value}'"
_TENANT_ACTIVE = f"SELECT 1 FROM runs WHERE tenant_id = :tenant_id AND phase IN ({_ACTIVE}) LIMIT :active_cap"
_TENANT_QUEUED = f"SELECT 1 FROM runs WHERE tenant_id = :tenant_id AND phase = {_QUEUED} LIMIT :tenant_cap"
_ALL_QUEUED = f"SELECT 1 FROM runs WHERE phase = {_QUEUED} LIMIT :global_cap"
# The three counts in one statement: one round trip, one snapshot.
_COUNTS = (
    f"SELECT (SELECT count(*) FROM ({_TENANT_ACTIVE}) AS active), "
    f"(SELECT count(*) FROM ({_TENANT_QUEUED}) AS tenant_queued), "
    f"(SELECT count(*) FROM ({_ALL_QUEUED}) AS all_queued)"
)
_COUNT_ALL_QUEUED = f"SELECT count(*) FROM ({_ALL_QUEUED}) AS all_queued"


@dataclass(frozen=True, slots=True, kw_only=True)
class Admission:
    """The limits a new run of ``tenant_id`` must fit in; see the module docstring.

    Attributes:
        tenant_id: The caller's tenant.
        max_queued_runs: QUEUED runs of all tenants.
        max_queued_runs_per_tenant: QUEUED runs of this tenant.
        max_active_runs_per_tenant: Runs of this tenant that have not ended (queued included).
        retry_after_s: What RetryInfo tells a refused caller.
    """

    tenant_id: str
    max_queued_runs: int
    max_queued_runs_per_tenant: int
    max_active_runs_per_tenant: int
    retry_after_s: float

    def lock(self, conn: Connection) -> None:
        """Serialise this tenant's admissions across replicas (PostgreSQL; released at commit)."""
        if conn.dialect.name == "postgresql":
            key = zlib.crc32(self.tenant_id.encode()) - 2**31  # int4
            lock = text("SELECT pg_advisory_xact_lock(:space, :key)")
            conn.execute(lock, {"space": _LOCK_SPACE, "key": key})

    def check(self, conn: Connection) -> None:
        """Refuse the run when a limit is reached.

        Raises:
            OverLimit: ``TOO_MANY_ACTIVE_RUNS`` or ``TOO_MANY_QUEUED_RUNS`` (metadata
                ``scope`` tenant or global, and ``limit``), with ``retry_after_s``.
        """
        paramstyle = conn.dialect.paramstyle
        limit = self.max_queued_runs
        params = {
            "tenant_id": self.tenant_id,
            "active_cap": self.max_active_runs_per_tenant,
            "tenant_cap": self.max_queued_runs_per_tenant,
            "global_cap": limit,
        }
        row = conn.exec_driver_sql(for_paramstyle(_COUNTS, paramstyle), params).one()
        active, mine, everyone = (int(n) for n in row)
        if active >= self.max_active_runs_per_tenant:
            self._refuse("TOO_MANY_ACTIVE_RUNS", "runs not ended", "tenant", self.max_active_runs_per_tenant)
        if mine >= self.max_queued_runs_per_tenant:
            self._refuse("TOO_MANY_QUEUED_RUNS", "queued runs", "tenant", self.max_queued_runs_per_tenant)
        if everyone >= limit - GLOBAL_EXACT_WITHIN and conn.dialect.name == "postgresql":
            # Near the limit: count again holding the one global lock, so that no two pass together.
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _GLOBAL_LOCK})
            recount = conn.exec_driver_sql(for_paramstyle(_COUNT_ALL_QUEUED, paramstyle), params)
            everyone = int(recount.scalar_one())
        if everyone >= limit:
            self._refuse("TOO_MANY_QUEUED_RUNS", "queued runs", "global", limit)

    def _refuse(self, reason: str, what: str, scope: str, limit: int) -> None:
        whose = "of this tenant" if scope == "tenant" else "on this server"
        raise OverLimit(
            f"too many {what} {whose} (limit {limit}); retry later",
            reason=reason,
            retry_after_s=self.retry_after_s,
            metadata={"scope": scope, "limit": str(limit)},
        )


@dataclass(slots=True)
class _Turn:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class TenantTurns:
    """One admitting transaction per tenant at a time from this process (PostgreSQL).

    The tenant's advisory lock serialises them anyway; waiting for it inside a transaction held
    a pooled connection per waiter, so a burst of one tenant's starts took every connection of
    the pool (and opened and closed overflow ones) while the runs already started waited for
    one. Waiting here holds none. Other tenants are not held up.
    """

    def __init__(self) -> None:
        self._turns: dict[str, _Turn] = {}

    @contextlib.asynccontextmanager
    async def turn(self, tenant_id: str) -> AsyncIterator[None]:
        turn = self._turns.get(tenant_id)
        if turn is None:
            turn = self._turns[tenant_id] = _Turn()
        turn.users += 1
        try:
            async with turn.lock:
                yield
        finally:
            turn.users -= 1
            if not turn.users:  # nobody holds or waits: forget the tenant (no growth)
                del self._turns[tenant_id]

    def __len__(self) -> int:
        return len(self._turns)
