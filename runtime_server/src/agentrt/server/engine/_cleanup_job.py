"""The cleanup job (S002 §8): retries the cleanups that ended runs gave up on (CLEANUP_UNKNOWN).

Every replica runs it. A pass claims ended runs whose cleanup status is UNKNOWN and due (the
same lease and fencing token as a driver's, so two replicas never retry one run at once),
tries each given-up cleanup once more under its own idempotency key, appends what happened to
the run's log and sets the next due time, doubling from ``[cleanup] retry_interval_s`` to
``retry_cap_s``. A run ended by repeated faults (from its row, without its cleanups) is handed
over the same way, with its cleanups never run.

What it appends is the run's cleanup tail, the only records allowed after ``run.ended`` (the
run's end does not change; its cleanup status does): cleanup.started, cleanup.completed and
cleanup.failed, and, in the commit that moves the status from UNKNOWN to DONE, cleanup.settled,
which closes the tail. Followers end their streams on it (``api/_streams``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from typing import Protocol

from agentrt.server.core import (
    CleanupCompleted,
    CleanupFailed,
    CleanupSettled,
    CleanupStarted,
    Event,
    LeaseLost,
    cleanup_key,
    replay,
)
from agentrt.server.engine._cleanup_step import perform_cleanup
from agentrt.server.engine._commit_buffer import NO_CHANGE, cleanup_columns
from agentrt.server.engine._driver import read_log
from agentrt.server.engine._ports import Ports
from agentrt.server.engine._run import commit_after_row
from agentrt.server.store import Claim, RowUpdate, RunRecord, decode_event
from agentrt.server.telemetry import log_failure

__all__ = ["CleanupJob"]

log = logging.getLogger("agentrt.cleanup")


class CleanupClaims(Protocol):
    """Where the job finds its work: the store's claim of ended runs with unknown cleanups."""

    async def claim_cleanups(self, *, owner: str, now_ms: int, ttl_ms: int, limit: int) -> list[Claim]: ...


class CleanupJob:
    """Retries given-up cleanups of ended runs, a batch per pass."""

    def __init__(self, ports: Ports, *, store: CleanupClaims, ttl_ms: int):
        self.ports = ports
        self.store = store  # claim_cleanups lives on the store, not on the RunLog port
        self.ttl_ms = ttl_ms
        self.passes = 0  # completed passes, for tests and operators

    @property
    def interval_s(self) -> float:
        return min(30.0, max(0.2, self.ports.settings.cleanup.retry_interval_s / 2))

    async def run_forever(self) -> None:
        while True:
            try:
                await self.run_pass()
            except Exception as exc:
                log_failure(log, exc, "cleanup pass failed; trying again in %.1f s", self.interval_s)
            await asyncio.sleep(self.interval_s)

    async def run_pass(self) -> int:
        """One pass, up to ``[cleanup] batch`` runs; the number of runs it took.

        Runs are claimed one at a time, each right before it is worked on: a batch claimed at
        once would hold leases that lapse while earlier runs' cleanups take their time.
        """
        ports = self.ports
        taken = 0
        seen: set[str] = set()
        while taken < ports.settings.cleanup.batch:
            claims: Sequence[Claim] = await self.store.claim_cleanups(
                owner=ports.owner, now_ms=ports.now_ms(), ttl_ms=self.ttl_ms, limit=1
            )
            if not claims:
                break
            claim = claims[0]
            if claim.run_id in seen:  # its retry failed unexpectedly this pass: leave it for the next
                await ports.log.release(claim.run_id, owner=ports.owner)
                break
            seen.add(claim.run_id)
            taken += 1
            try:
                await self._retry(claim)
            except LeaseLost as exc:
                log.info("cleanup of run %s moved on: %s", claim.run_id, exc)
            except Exception as exc:
                log_failure(log, exc, "cleanup of run %s failed; it stays CLEANUP_UNKNOWN", claim.run_id)
                await ports.log.release(claim.run_id, owner=ports.owner)
        self.passes += 1
        return taken

    async def _retry(self, claim: Claim) -> None:
        ports = self.ports
        found = await ports.log.get_run(claim.run_id)
        if found is None or found.lease_owner != ports.owner:
            return
        record: RunRecord = found  # moves on with each commit: the next one's fence
        state = replay(
            record.run_id, [decode_event(e.type, e.payload) for e in await read_log(ports, claim.run_id)]
        )
        # Given up, or never run (a run ended from its row after repeated faults).
        given_up = [c for c in reversed(state.cleanups) if not c.done]
        config = ports.settings.cleanup

        async def commit(event: Event) -> None:
            nonlocal record
            state.apply(event)
            record = await commit_after_row(ports, record, [event], NO_CHANGE, ports.now_ms())

        for entry in given_up:
            attempt = entry.attempts + 1
            key = cleanup_key(record.run_id, entry.cleanup_id)
            await commit(CleanupStarted(cleanup_id=entry.cleanup_id, attempt=attempt, idempotency_key=key))
            done = await perform_cleanup(
                ports,
                entry,
                run_id=record.run_id,
                tenant_id=record.tenant_id,
                session_id=record.session_id or "",
                generation=claim.generation,
                attempt=attempt,
                timeout_s=config.call_timeout_s,
            )
            if done.ok:
                await commit(CleanupCompleted(cleanup_id=entry.cleanup_id, attempt=attempt))
                ports.counters.inc("cleanup_recovered_count")
                log.info("run %s: cleanup %s released on retry %s", record.run_id, entry.cleanup_id, attempt)
            else:
                failed = CleanupFailed(
                    cleanup_id=entry.cleanup_id, attempt=attempt, message=done.message, final=True
                )
                await commit(failed)
        columns = cleanup_columns(state, ports.now_ms(), config.retry_interval_s)
        retries = (record.cleanup_retries or 0) + 1
        settled: list[Event] = []
        if columns.due_ms is not None:  # still unknown: back off, doubling to the cap
            delay_s = min(config.retry_cap_s, config.retry_interval_s * 2 ** min(retries, 30))
            columns = dataclasses.replace(columns, due_ms=ports.now_ms() + round(delay_s * 1000))
        else:  # all released: the tail closes in the commit that makes the status DONE
            settled.append(CleanupSettled(retries=retries))
            state.apply(settled[0])
        update = RowUpdate(cleanup=columns, cleanup_retries=retries, release_lease=True)
        await commit_after_row(ports, record, settled, update, ports.now_ms())
