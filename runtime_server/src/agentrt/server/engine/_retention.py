"""The retention job (DESIGN R8.4): every ``retention.interval_s`` it prunes ended runs past their
tenant's age. Every replica runs it; the pruner's batches make that safe (see store/_retention.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from agentrt.server.config import Settings
from agentrt.server.core import RetentionPolicy
from agentrt.server.store import Database, Pruner
from agentrt.server.telemetry import log_failure

__all__ = [
    "LEDGER_RECONCILE_HORIZON_S",
    "PAYLOADS_DIR",
    "RetentionJob",
    "build_pruner",
    "ledger_keep_bound_s",
]

log = logging.getLogger("agentrt.retention")
PAYLOADS_DIR = "payloads"  # file payloads live under data_dir/payloads
# How long after a run's deadline a late retry of one of its keys may still come: recovery after an
# outage and reconciliation of an unknown outcome (whose RUNNING ledger entry is never pruned).
LEDGER_RECONCILE_HORIZON_S = 86_400.0


def ledger_keep_bound_s(settings: Settings) -> float:
    """How long a tool host must keep a settled ledger entry so a late retry still dedupes.

    A key is first sent when its call starts and retried, at the latest, until the run's deadline
    (at most ``limits.max_timeout_s``, lengthened by the time it waited for an approval, at most
    an agent's ``approvals.timeout_s``) plus the reconcile horizon. The README's retention section
    documents it; spawned tool hosts get at least this as ``--ledger-keep-s``.
    """
    approvals = [a.approvals.timeout_s for a in settings.agents.values()]
    longest_approval = max(approvals, default=86_400.0)
    return settings.limits.max_timeout_s + longest_approval + LEDGER_RECONCILE_HORIZON_S


def build_pruner(
    settings: Settings, db: Database, *, fault_point: Callable[[str], None] | None = None
) -> Pruner | None:
    """The pruner of ``settings.retention``, or None when retention is not configured.

    ``fault_point`` is the test facility's hook (``FaultPlan.hit``), see :class:`Pruner`.
    """
    section = settings.retention
    policy = RetentionPolicy(ended_after_s=section.ended_after_s, per_tenant=dict(section.per_tenant))
    if not policy.configured:
        return None
    return Pruner(
        db,
        policy=policy,
        batch_size=section.batch_size,
        payload_dir=Path(settings.data_dir) / PAYLOADS_DIR,
        fault_point=fault_point,
    )


class RetentionJob:
    """Prunes at start and then every ``interval_s``; a failed pass is logged and tried again later.

    Args:
        pruner: What to prune with.
        interval_s: Seconds between passes.
        clock: Epoch seconds (the engine's clock, so tests can move time).
    """

    def __init__(self, *, pruner: Pruner, interval_s: float, clock: Callable[[], float]) -> None:
        self.pruner = pruner
        self.interval_s = interval_s
        self.clock = clock
        self.passes = 0  # completed passes, for tests and operators

    async def run_forever(self) -> None:
        while True:
            try:
                await self.pruner.prune(now_ms=int(self.clock() * 1000))
                self.passes += 1
            except Exception as exc:
                log_failure(log, exc, "retention pass failed; trying again in %.0f s", self.interval_s)
            await asyncio.sleep(self.interval_s)
