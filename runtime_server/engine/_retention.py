"""The retention job (DESIGN R8.4): every ``retention.interval_s`` it prunes ended runs past their
tenant's age. Every replica runs it; the pruner's batches make that safe (see store/_retention.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from runtime_server._config import Settings
from runtime_server.core import RetentionPolicy
from runtime_server.store import Database, Pruner

__all__ = ["PAYLOADS_DIR", "RetentionJob", "build_pruner"]

log = logging.getLogger("agentrt.retention")
PAYLOADS_DIR = "payloads"  # file payloads live under data_dir/payloads


def build_pruner(settings: Settings, db: Database) -> Pruner | None:
    """The pruner of ``settings.retention``, or None when retention is not configured."""
    section = settings.retention
    policy = RetentionPolicy(ended_after_s=section.ended_after_s, per_tenant=dict(section.per_tenant))
    if not policy.configured:
        return None
    return Pruner(
        db,
        policy=policy,
        batch_size=section.batch_size,
        payload_dir=Path(settings.data_dir) / PAYLOADS_DIR,
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
            except Exception:
                log.exception("retention pass failed; trying again in %.0f s", self.interval_s)
            await asyncio.sleep(self.interval_s)
