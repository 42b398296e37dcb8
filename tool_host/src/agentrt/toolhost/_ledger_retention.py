"""Ledger retention (DESIGN R8.4, R5.4): the tool host forgets settled operations older than a keep time.

The bound: a ledger entry must outlive every retry of its key. The runtime sends a key again only
while the call's run is alive: within the run's wall-clock budget (at most the runtime's
``limits.max_timeout_s``, 1 day by default), lengthened by the time it waits for approvals (each
wait at most the agent's ``approvals.timeout_s``, 1 day by default) and by reconciliation of an
unknown outcome. Hence the minimum keep time, :data:`MIN_KEEP_S` = 3 days; raise ``--ledger-keep-s``
when the runtime allows longer runs or approvals. What is pruned:

- SUCCEEDED and FAILED entries whose last update is older than the keep time. A retry of such a
  key after that runs the tool again, which is why the keep time has a floor.
- Never a RUNNING entry: one that outlived its host life is the only evidence of a write whose
  outcome is unknown (R4.4), and it stays until the runtime or a person settles it.
- Fencing tokens of runs with no entry left, not updated for the keep time.
- Intent claims (``_intents.py``) older than the keep time whose claiming entry is gone: an intent
  without a window is deduplicated for as long as the ledger keeps its first call.

Pruning runs on its own connection in a worker thread, in batches of short transactions, so calls
keep being served meanwhile. A shared PostgreSQL ledger (``_ledger_pg``) prunes the same rows; every
host of its pool may run the passes, which delete the same rows at most once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from agentrt.toolhost._ledger_types import LedgerUnavailable

__all__ = [
    "DEFAULT_INTERVAL_S",
    "DEFAULT_KEEP_S",
    "MIN_KEEP_S",
    "LedgerPruneCounts",
    "LedgerRetention",
    "prune_ledger",
    "run_ledger_retention",
]

_log = logging.getLogger("tool_host.retention")

DAY_S = 86_400.0
MIN_KEEP_S = 3 * DAY_S
"""Floor of the keep time: the runtime's default longest run, approval wait and a day to reconcile."""
DEFAULT_KEEP_S = 30 * DAY_S
DEFAULT_INTERVAL_S = 3600.0
_BATCH = 500


@dataclasses.dataclass(frozen=True, slots=True)
class LedgerPruneCounts:
    """Rows one pass removed."""

    operations: int = 0
    fences: int = 0
    intents: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class LedgerRetention:
    """How long the ledger keeps settled entries, and how often the host prunes.

    Attributes:
        keep_s: Seconds after its last update a settled entry is pruned; ``math.inf`` keeps all.
        interval_s: Seconds between passes.
        clock_ns: Epoch nanoseconds (injectable for tests).

    Raises:
        ValueError: ``keep_s`` below :data:`MIN_KEEP_S` or ``interval_s`` not a positive number.
    """

    keep_s: float = DEFAULT_KEEP_S
    interval_s: float = DEFAULT_INTERVAL_S
    clock_ns: Callable[[], int] = time.time_ns

    def __post_init__(self) -> None:
        if math.isnan(self.keep_s) or self.keep_s < MIN_KEEP_S:
            raise ValueError(
                f"the ledger keep time must be at least {MIN_KEEP_S:.0f} s (3 days): a key must outlive "
                "every retry of it (the longest run, its approval waits and reconciliation)"
            )
        if not (math.isfinite(self.interval_s) and self.interval_s > 0):
            raise ValueError("the ledger prune interval must be a positive number of seconds")

    def cutoff_ns(self, now_ns: int) -> int | None:
        """Settled entries last updated before this are pruned; None when nothing ever is."""
        if math.isinf(self.keep_s):
            return None
        return now_ns - math.ceil(self.keep_s * 1e9)


_DELETE_OPERATIONS = (
    "DELETE FROM operations WHERE rowid IN (SELECT rowid FROM operations"
    " WHERE status != 'RUNNING' AND update_time_ns < ? LIMIT ?)"
)
_DELETE_FENCES = (
    "DELETE FROM fencing WHERE rowid IN (SELECT rowid FROM fencing f WHERE f.update_time_ns < ?"
    " AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.tenant = f.tenant AND o.run_id = f.run_id)"
    " LIMIT ?)"
)

_DELETE_INTENTS = (
    "DELETE FROM intents WHERE rowid IN (SELECT rowid FROM intents i WHERE i.claim_time_ns < ?"
    " AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.tenant = i.tenant"
    " AND o.idempotency_key = i.idempotency_key) LIMIT ?)"
)


def prune_ledger(path: Path, *, cutoff_ns: int, batch_size: int = _BATCH) -> LedgerPruneCounts:
    """Prune the ledger file at ``path`` (see the module doc), one short transaction per batch.

    Args:
        path: The ledger's SQLite file.
        cutoff_ns: Settled entries and idle fences last updated before this epoch-ns go.
        batch_size: Rows per transaction.

    Raises:
        sqlite3.Error: The file cannot be read or written.
    """
    db = sqlite3.connect(path, isolation_level=None, timeout=5.0)
    try:
        db.execute("PRAGMA busy_timeout=5000")
        # Makes each batch an index range scan; an older host opening the file ignores it.
        db.execute("CREATE INDEX IF NOT EXISTS ix_operations_update_time ON operations (update_time_ns)")
        counts = [0, 0, 0]
        for index, statement in enumerate((_DELETE_OPERATIONS, _DELETE_FENCES, _DELETE_INTENTS)):
            while True:
                deleted = db.execute(statement, (cutoff_ns, batch_size)).rowcount
                counts[index] += deleted
                if deleted < batch_size:
                    break
        return LedgerPruneCounts(operations=counts[0], fences=counts[1], intents=counts[2])
    finally:
        db.close()


async def run_ledger_retention(
    prune: Path | Callable[[int], LedgerPruneCounts], retention: LedgerRetention
) -> None:
    """Prune now and then every ``retention.interval_s``, until cancelled.

    Args:
        prune: A SQLite ledger file, or a ledger's own pass (``LedgerBackend.prune``), given the cutoff.
        retention: The keep time and interval.
    """
    if isinstance(prune, Path):
        path = prune

        def prune(cutoff_ns: int) -> LedgerPruneCounts:
            return prune_ledger(path, cutoff_ns=cutoff_ns)

    while True:
        cutoff = retention.cutoff_ns(retention.clock_ns())
        if cutoff is None:
            return
        try:
            counts = await asyncio.to_thread(prune, cutoff)
            if counts.operations or counts.fences:
                _log.info(
                    "ledger retention pruned %d entries and %d fences", counts.operations, counts.fences
                )
        except (sqlite3.Error, LedgerUnavailable) as exc:
            _log.warning("ledger retention pass failed (%s); trying again later", type(exc).__name__)
        await asyncio.sleep(retention.interval_s)
