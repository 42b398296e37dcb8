"""Claims: which runs a worker may take, and taking their leases (R5.5, R10.1).

Two claims share one way of taking leases: the driver's (:data:`RUNS`, runs that need a worker)
and the cleanup job's (:data:`CLEANUPS`, ended runs whose cleanups are due again). Each is built
once, with bound parameters: building these SQLAlchemy expressions (the session check aliases
the runs table, every column of it) cost ten times what running them did, on the event loop.
They run as driver SQL (``_fast_sql``), compiled once per dialect and number of runs taken.

The driver's claim is fair between tenants: candidates are ranked within their tenant by age,
and taken rank by rank (every tenant's oldest, then every tenant's second, ...), so a tenant
with a backlog of thousands of queued runs takes one of each batch's places per other tenant
waiting, not all of them. Candidates are sought through the index on phase, by the names of
the phases not ended: spelled ``NOT IN`` (ended), the query walked every run ever stored.

On PostgreSQL the candidates are locked with ``FOR UPDATE SKIP LOCKED``, so replicas claiming at
once never block on each other or take the same run; each lease is then taken only if the run
is still wanted, in one statement for the batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    Integer,
    Select,
    Update,
    and_,
    bindparam,
    exists,
    func,
    or_,
    select,
    update,
)

from agentrt.server.core import ACTIVE_PHASES, TERMINAL_PHASES, Phase
from agentrt.server.store._fast_sql import driver_statement
from agentrt.server.store._records import Claim
from agentrt.server.store._schema import runs, signals

__all__ = ["CLEANUPS", "RUNS", "RUNS_AMONG", "LeaseTaking"]

_ACTIVE = sorted(p.value for p in ACTIVE_PHASES)
_TERMINAL = sorted(p.value for p in TERMINAL_PHASES)
_PAUSED = [Phase.WAITING_APPROVAL.value, Phase.UNKNOWN_OUTCOME.value]
_NOW = bindparam("now_ms", type_=BigInteger)
_LIMIT = bindparam("limit", type_=Integer)


@dataclass(frozen=True, slots=True)
class LeaseTaking:
    """A claim's two statements: its candidates in order, and taking the leases of some."""

    candidates: Select[Any]
    take: Update

    @classmethod
    def build(cls, wanted: ColumnElement[bool], candidates: Select[Any]) -> LeaseTaking:
        take = (
            update(runs)
            .where(runs.c.run_id.in_(bindparam("taken", expanding=True)), wanted)
            .values(
                lease_owner=bindparam("owner"),
                lease_expires_ms=bindparam("expires_ms", type_=BigInteger),
                lease_generation=runs.c.lease_generation + 1,
            )
            .returning(runs.c.run_id, runs.c.lease_generation, runs.c.tenant_id)
        )
        # Rendered on PostgreSQL only; SQLite has one writer at a time anyway.
        return cls(candidates.with_for_update(skip_locked=True, of=runs), take)

    def run(self, conn: Connection, params: Mapping[str, Any], *, owner: str, expires_ms: int) -> list[Claim]:
        """Lease each candidate still wanted to ``owner``, with the next fencing token, in order."""
        among = params.get("run_ids")
        sizes = {} if among is None else {"run_ids": len(among)}
        candidates = driver_statement(self.candidates, conn.dialect, **sizes)
        found = [row[0] for row in candidates.execute(conn, params)]
        if not found:
            return []
        take = driver_statement(self.take, conn.dialect, taken=len(found))
        bound = {k: v for k, v in params.items() if k != "run_ids"}  # the candidates' alone
        taken = take.execute(conn, {**bound, "taken": found, "owner": owner, "expires_ms": expires_ms})
        leased = {row[0]: Claim(row[0], int(row[1]), str(row[2])) for row in taken}
        return [leased[run_id] for run_id in found if run_id in leased]


def _runs_wanted() -> ColumnElement[bool]:
    """Runs that need a worker now: unowned or whose lease expired, and due."""
    free = or_(runs.c.lease_owner.is_(None), runs.c.lease_expires_ms < _NOW)
    has_signal = exists(select(signals.c.id).where(signals.c.run_id == runs.c.run_id))
    # Parked runs come back when their wake time is due: a reconciliation retry, or an approval
    # that expires (to be asked again or failed, per the agent's policy).
    due = or_(runs.c.wake_ms.is_(None), runs.c.wake_ms <= _NOW)
    # A session's turns run one at a time, in the order they were accepted (R8.3).
    earlier = runs.alias("earlier")
    turn_is_next = or_(
        runs.c.session_id.is_(None),
        ~exists(
            select(earlier.c.run_id).where(
                earlier.c.tenant_id == runs.c.tenant_id,
                earlier.c.phase.in_(_ACTIVE),
                earlier.c.session_id == runs.c.session_id,
                earlier.c.run_id < runs.c.run_id,  # run ids sort by creation time
            )
        ),
    )
    return and_(
        runs.c.phase.in_(_ACTIVE),
        turn_is_next,
        free,
        or_(
            and_(runs.c.phase.not_in(_PAUSED), due),
            # Paused runs are taken when their wake time is due or a signal waits for them...
            and_(runs.c.phase.in_(_PAUSED), or_(runs.c.wake_ms <= _NOW, has_signal)),
            # ...and an approval wait when a cancel is pending.
            and_(runs.c.phase == Phase.WAITING_APPROVAL.value, runs.c.cancel_requested_ms.is_not(None)),
        ),
    )


def _fair_runs(wanted: ColumnElement[bool], *, among: bool) -> LeaseTaking:
    turn = func.row_number().over(partition_by=runs.c.tenant_id, order_by=(runs.c.created_ms, runs.c.run_id))
    ranked = select(runs.c.run_id, runs.c.created_ms, turn.label("turn")).where(wanted)
    if among:
        ranked = ranked.where(runs.c.run_id.in_(bindparam("run_ids", expanding=True)))
    ranks = ranked.subquery("ranks")
    candidates = (
        select(runs.c.run_id)
        .join(ranks, ranks.c.run_id == runs.c.run_id)
        .order_by(ranks.c.turn, ranks.c.created_ms, ranks.c.run_id)
        .limit(_LIMIT)
    )
    return LeaseTaking.build(wanted, candidates)


def _cleanups() -> LeaseTaking:
    wanted = and_(
        runs.c.cleanup_status == "UNKNOWN",
        runs.c.cleanup_due_ms <= _NOW,
        runs.c.phase.in_(_TERMINAL),
        or_(runs.c.lease_owner.is_(None), runs.c.lease_expires_ms < _NOW),
    )
    candidates = select(runs.c.run_id).where(wanted).order_by(runs.c.cleanup_due_ms).limit(_LIMIT)
    return LeaseTaking.build(wanted, candidates)


_WANTED = _runs_wanted()
#: Runs that need a worker, tenants taking turns. Parameters: now_ms, limit.
RUNS = _fair_runs(_WANTED, among=False)
#: The same among given runs. Parameters: now_ms, limit, run_ids.
RUNS_AMONG = _fair_runs(_WANTED, among=True)
#: Ended runs whose cleanups are due for the cleanup job, the longest due first. Parameters: now_ms, limit.
CLEANUPS = _cleanups()
