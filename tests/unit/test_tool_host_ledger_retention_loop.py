"""The retention loop runs any ledger's own pass, and a pass that fails is retried next interval."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from agentrt.toolhost._ledger_retention import (
    MIN_KEEP_S,
    LedgerPruneCounts,
    LedgerRetention,
    run_ledger_retention,
)
from agentrt.toolhost._ledger_types import LedgerUnavailable


async def test_a_failed_pass_is_logged_by_class_and_the_next_one_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cutoffs: list[int] = []
    third = asyncio.Event()
    loop = asyncio.get_running_loop()

    def prune(cutoff_ns: int) -> LedgerPruneCounts:
        cutoffs.append(cutoff_ns)
        if len(cutoffs) == 1:
            raise LedgerUnavailable(
                "ledger postgresql://u:***@h/db schema s: pruning failed (OperationalError: x)"
            )
        if len(cutoffs) == 3:
            loop.call_soon_threadsafe(third.set)
        return LedgerPruneCounts(operations=1)

    retention = LedgerRetention(keep_s=MIN_KEEP_S, interval_s=0.01, clock_ns=lambda: 10**19)
    task = asyncio.create_task(run_ledger_retention(prune, retention))
    try:
        await asyncio.wait_for(third.wait(), timeout=10)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert cutoffs[:3] == [retention.cutoff_ns(10**19)] * 3
    failed = [r.getMessage() for r in caplog.records if "retention pass failed" in r.getMessage()]
    assert failed == ["ledger retention pass failed (LedgerUnavailable); trying again later"]
