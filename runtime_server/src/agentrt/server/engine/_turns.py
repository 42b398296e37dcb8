"""Fair turns between tenants after each commit, so one tenant's runs cannot fill the event loop.

Every run this process drives shares one event loop, which runs what is ready in arrival order.
Measured with one tenant keeping 200 runs stepping (bench/noisy_neighbour.py, SQLite): the loop
was busy all the time, with turns of up to 50-450 ms, and every await on another tenant's path
(accepting its call, its insert, its first commit, its stream) waited for a turn; its StartRun
took 0.1-0.3 s at the median and its first event 0.3-0.6 s, with new calls of the busy tenant
left unaccepted until gRPC cancelled them.

So a run goes on after a commit only when it gets a turn: while nobody waits, at once (no cost
on an idle loop); otherwise the waiters go in batches, round-robin across tenants, one batch per
turn of the loop, sized after how long the last turn took (:mod:`agentrt.server.core._fair`).
A tenant's run waiting beside another tenant's hundred goes in the next batch, and the runs let
go in one turn stay few enough for it to last about ``BatchLimits.target_s`` (what else is
ready then, tool replies and stream writes, comes on top: it follows from the runs let go).

The wait comes after the commit, never before: what a run did is durable at once, and the batch
of a group commit is not cut smaller by the turns.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentrt.server.core import BatchLimits, FairQueue, next_batch
from agentrt.server.engine._ports import RunLog
from agentrt.server.store import RunRecord, Signal, StoredCheckpoint, StoredEvent

__all__ = ["FairRunLog", "StepTurns"]


class StepTurns:
    """Who goes on next, per tenant in turn, a batch per turn of the event loop."""

    def __init__(self, *, limits: BatchLimits | None = None, clock: Callable[[], float] = time.monotonic):
        self._limits = limits or BatchLimits()
        self._clock = clock
        self._waiting: FairQueue[str, asyncio.Future[None]] = FairQueue()
        self._batch = self._limits.most
        self._granted = 0  # in the current turn of the loop
        self._tick: asyncio.Handle | None = None
        self._tick_at = 0.0

    async def take(self, tenant_id: str) -> None:
        """Return once ``tenant_id`` has its turn (at once while nobody waits and the turn has room)."""
        if not self._waiting and self._granted < self._batch:
            self._granted += 1
            self._schedule()
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.push(tenant_id, future)
        self._schedule()
        try:
            await future
        except asyncio.CancelledError:
            self._waiting.remove(tenant_id, future)
            raise

    def waiting(self) -> int:
        return len(self._waiting)

    def _schedule(self) -> None:
        if self._tick is None:
            # call_soon runs in the next turn of the loop: the time until then is this turn's length.
            self._tick_at = self._clock()
            self._tick = asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self._tick = None
        turn_s = self._clock() - self._tick_at
        if self._granted:
            self._batch = next_batch(self._batch, turn_s, self._limits)
        self._granted = 0
        while self._waiting and self._granted < self._batch:
            future = self._waiting.pop()
            if not future.done():  # a cancelled waiter is skipped (and removed itself)
                future.set_result(None)
                self._granted += 1
        if self._granted or self._waiting:
            self._schedule()


class FairRunLog:
    """The store as a run's log, with a turn taken after each commit (see the module docstring)."""

    def __init__(self, log: RunLog, *, turns: StepTurns, tenant_of: Callable[[str], str]):
        self._log = log
        self._turns = turns
        self._tenant_of = tenant_of

    async def get_run(self, run_id: str) -> RunRecord | None:
        return await self._log.get_run(run_id)

    async def read_events(self, run_id: str, *, after_seq: int = 0) -> list[StoredEvent]:
        return await self._log.read_events(run_id, after_seq=after_seq)

    async def read_signals(self, run_id: str) -> list[Signal]:
        return await self._log.read_signals(run_id)

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
        revision = await self._log.append(
            run_id,
            expected_revision=expected_revision,
            owner=owner,
            first_seq=first_seq,
            new_events=new_events,
            values=values,
            now_ms=now_ms,
            consume_signals=consume_signals,
        )
        await self._turns.take(self._tenant_of(run_id))
        return revision

    async def release(self, run_id: str, *, owner: str) -> None:
        await self._log.release(run_id, owner=owner)

    async def repark(
        self, run_id: str, *, owner: str, expected_revision: int, wake_ms: int, reconcile_attempts: int
    ) -> None:
        await self._log.repark(
            run_id,
            owner=owner,
            expected_revision=expected_revision,
            wake_ms=wake_ms,
            reconcile_attempts=reconcile_attempts,
        )

    async def write_checkpoint(self, checkpoint: StoredCheckpoint) -> None:
        await self._log.write_checkpoint(checkpoint)

    async def read_checkpoint(self, run_id: str) -> StoredCheckpoint | None:
        return await self._log.read_checkpoint(run_id)
