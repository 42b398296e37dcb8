"""Replay-then-follow of a run's events: no gap, no duplicate, and an end (R8.1, R8.2).

The follower subscribes to the live bus when it is built, before any await, then
reads the run's row and the store up to the row's ``last_seq``: nothing committed
in between can be missed, and the row's phase and cleanup status are those *at* the
last event delivered (an event and its row move in one transaction). From that position:

- an ended run whose log is complete ends the stream, whatever ``after_seq`` was (even
  past the end). The log is complete at ``run.ended`` unless the run ended with its
  cleanup status UNKNOWN: then the cleanup job's records follow it (the cleanup tail),
  until ``cleanup.settled`` closes it (``engine/_cleanup_job``);
- an ended run whose tail is open gets a stream-only ``run.waiting`` item (reason
  ``WAIT_REASON_CLEANUP``), once per stream, after what is stored of the tail: it ends
  a RunAgent or non-follow stream; a follow stream goes on with the tail live;
- with ``stop_at_wait`` (RunAgent) a run waiting for something outside itself
  ends the stream with a ``run.waiting`` item saying what;
- otherwise live items follow. Live items at or below the last delivered seq are
  dropped; a gap, a paused (overfull) subscription, a nudge (another replica committed
  that seq; ``[redis]``) or an idle second sends the follower back to the row and the
  store, which also covers other replicas (and Redis being down). So does
  ``run.ended``: the row after it says whether a tail follows.

Detail (``EventDetail``): a stream may send fewer items than this. What is left out is skipped
where items leave the follower, before any conversion; where the stream ends, and how it reads
and resumes, do not change, so no gap and no duplicate still hold for what is sent (their seqs
skip). Live items are converted once per item, whatever the number of followers
(:meth:`~agentrt.server.events.LiveItem.encoded`); replayed pages, once per follower as read.

Batches: items leave the follower in batches, the items readable together: a replay page's,
or the live items buffered when the reader looked (one commit's, or more when it lags),
bounded by ``_MAX_BATCH_ITEMS`` and ``_MAX_BATCH_BYTES``. A stream with ``batch_events``
sends each batch as one message; the others send them one item at a time.

Memory: replay pages are bounded in bytes as well as rows, and the live buffer is
the subscription's (bounded; see :mod:`agentrt.server.events`). A follower that
falls behind loses only live-only text deltas: persisted events are re-read.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from agentrt.server.config import StreamsConfig
from agentrt.server.core import CleanupStatus, Phase
from agentrt.server.core import events as ev
from agentrt.server.events import EventBus, LiveItem, Subscription, item_bytes
from agentrt.server.store import EventPage, RunRecord, Store, StoredEvent

_MAX_PAGE_ROWS = 500
_MAX_PAGE_BYTES = 64 * 1024  # one replay page in memory per follower, whatever the buffer allows
# One live batch (one message with batch_events): far below the 4 MiB a gRPC reader takes by
# default, even with the structured twins the API adds to the stored text.
_MAX_BATCH_ITEMS = 256
_MAX_BATCH_BYTES = 256 * 1024
_WAIT_MARKERS = frozenset({ev.APPROVAL_REQUESTED, ev.TOOL_OUTCOME_UNKNOWN})
_ROW_DECIDES = frozenset({ev.RUN_ENDED, ev.CLEANUP_SETTLED})
T = TypeVar("T")


class Detail(Enum):
    """Which items a stream sends (the proto's ``EventDetail``, whose comments are the contract)."""

    ALL = "all"
    MILESTONES = "milestones"  # persisted events but per-step noise, and run.waiting
    FINAL = "final"  # only the items that can end a stream

    def sends(self, item: StoredEvent) -> bool:
        """Whether a stream of this detail sends ``item``."""
        if self is Detail.ALL:
            return True
        if self is Detail.FINAL:
            return item.type in _FINAL
        return item.type not in _NOISE and (item.seq > 0 or item.type == ev.RUN_WAITING)


# Per-step noise: a step's start says little its model.completed does not; checkpoints are internal.
_NOISE = frozenset({ev.MODEL_TEXT_DELTA, ev.STEP_STARTED, ev.RUN_CHECKPOINTED})
# What ends a stream: run.ended (a complete log), run.waiting (RunAgent, or an open cleanup tail
# without follow), cleanup.settled (the tail closed).
_FINAL = frozenset({ev.RUN_ENDED, ev.RUN_WAITING, ev.CLEANUP_SETTLED})


@dataclass(frozen=True, slots=True)
class Waiting:
    """Why a run is waiting on something outside itself: the content of a ``run.waiting`` item."""

    reason: str  # a WaitReason name
    phase: Phase
    detail: str

    def to_stored(self, run_id: str, now_ms: int) -> StoredEvent:
        """The stream-only item (seq 0, never stored) that ends a RunAgent stream."""
        payload = {"reason": self.reason, "phase": f"RUN_PHASE_{self.phase.value}", "detail": self.detail}
        return StoredEvent(run_id, 0, ev.RUN_WAITING, json.dumps(payload), now_ms)


def waiting_for(record: RunRecord, *, unknown_call: str = "", session_head: str = "") -> Waiting | None:
    """What ``record`` waits for outside itself, or None while it can go on by itself.

    An ended run waits for nothing but the cleanup job, and only while its cleanup tail is
    open; for it the answer is the ``WAIT_REASON_CLEANUP`` mark.

    Args:
        record: The run's row.
        unknown_call: The call id of the last tool.outcome.unknown seen, if any.
        session_head: The run id of its session's oldest unended run ("" if unknown or none).
    """
    phase = Phase(record.phase)
    if phase.terminal:
        if record.cleanup_status != CleanupStatus.UNKNOWN.value:
            return None  # its log is complete
        # Ended, with cleanups the cleanup job retries: their records, the tail, are to come.
        return Waiting("WAIT_REASON_CLEANUP", phase, str(record.cleanups_unknown or 0))
    if phase is Phase.WAITING_APPROVAL:
        pending = json.loads(record.pending_approval or "{}")
        # A budget pause is an approval with no call: a person grants more, or not.
        reason = "WAIT_REASON_APPROVAL" if pending.get("call_id") else "WAIT_REASON_BUDGET"
        return Waiting(reason, phase, str(pending.get("approval_id", "")))
    if phase is Phase.UNKNOWN_OUTCOME:
        return Waiting("WAIT_REASON_UNKNOWN_OUTCOME", phase, unknown_call)
    if phase is Phase.QUEUED and record.session_id and session_head and session_head != record.run_id:
        return Waiting("WAIT_REASON_SESSION_QUEUE", phase, session_head)
    return None


async def current_waiting(store: Store, record: RunRecord, *, unknown_call: str = "") -> Waiting | None:
    """:func:`waiting_for` with the session's head looked up when the run is queued in a session."""
    head = ""
    if record.phase == Phase.QUEUED.value and record.session_id:
        active = await store.active_session_run(tenant_id=record.tenant_id, session_id=record.session_id)
        head = active.run_id if active is not None else ""
    return waiting_for(record, unknown_call=unknown_call, session_head=head)


class Follower:
    """One stream's reader of one run: replay, then (with ``follow``) live items until an end.

    Build it where the stream starts: it subscribes at once. Iterate :meth:`events` once.
    """

    def __init__(
        self,
        *,
        store: Store,
        bus: EventBus,
        run_id: str,
        after_seq: int,
        follow: bool,
        config: StreamsConfig,
        now_ms: Callable[[], int],
        stop_at_wait: bool = False,
        idle_recheck_s: float = 1.0,
        detail: Detail = Detail.ALL,
    ):
        self.store = store
        self.bus = bus
        self.run_id = run_id
        self.after_seq = after_seq
        self.follow = follow
        self.stop_at_wait = stop_at_wait
        self.idle_recheck_s = idle_recheck_s
        self.detail = detail
        self._now_ms = now_ms
        self._bounds = {
            "max_rows": min(_MAX_PAGE_ROWS, config.follower_buffer_events),
            "max_bytes": min(config.follower_buffer_bytes, _MAX_PAGE_BYTES),
        }
        self._unknown_call = ""
        self.replaying = False  # True while the item being sent came from a store page
        self.sub: Subscription | None = (
            bus.subscribe(
                run_id, max_events=config.follower_buffer_events, max_bytes=config.follower_buffer_bytes
            )
            if follow
            else None
        )

    def full_since(self) -> float | None:
        """Since when this follower's buffer has been full (None: it is not).

        A replay page waiting to be sent counts as full from the start: the store is not read
        again until the reader takes it.
        """
        if self.sub is not None and self.sub.paused_since is not None:
            return self.sub.paused_since
        return float("-inf") if self.replaying else None

    async def events(self) -> AsyncGenerator[StoredEvent, None]:
        """Yield the run's events after ``after_seq``; see the module docstring for when it ends."""
        async with aclosing(self._sent()) as batches:
            async for batch in batches:
                for item in batch:
                    yield item.event if isinstance(item, LiveItem) else item

    async def messages(self, convert: Callable[[StoredEvent], T]) -> AsyncGenerator[T, None]:
        """:meth:`events` as ``convert`` makes them; a live item is converted once for all followers.

        ``convert`` must be one function for every follower (its identity keys the cache), and
        what it returns is shared: never modify it.
        """
        async with aclosing(self.message_batches(convert)) as batches:
            async for batch in batches:
                for message in batch:
                    yield message

    async def message_batches(self, convert: Callable[[StoredEvent], T]) -> AsyncGenerator[list[T], None]:
        """:meth:`messages` in the batches they became readable in (never empty)."""
        async with aclosing(self._sent()) as batches:
            async for batch in batches:
                yield [
                    item.encoded(convert) if isinstance(item, LiveItem) else convert(item) for item in batch
                ]

    async def _sent(self) -> AsyncGenerator[Sequence[StoredEvent | LiveItem], None]:
        """The batches this stream sends: its detail's items, in order; unsubscribes at the end."""
        sends = self.detail.sends
        try:
            async with aclosing(self._stream(self.sub)) as batches:
                async for batch in batches:
                    if self.detail is not Detail.ALL:
                        batch = [i for i in batch if sends(i.event if isinstance(i, LiveItem) else i)]
                    if batch:
                        yield batch
        finally:
            self.replaying = False
            if self.sub is not None:
                self.bus.unsubscribe(self.sub)

    async def _replay(self, page: EventPage) -> AsyncGenerator[list[StoredEvent], None]:
        """One replay page (bounded in rows and, from the stored sizes, in bytes) as one batch, cut
        after ``cleanup.settled``: nothing is ever appended after it."""
        batch: list[StoredEvent] = []
        for item in page.events:
            self._note(item)
            batch.append(item)
            if item.type == ev.CLEANUP_SETTLED:
                break
        page.events.clear()
        self.replaying = True
        try:
            yield batch
        finally:
            self.replaying = False

    def _note(self, item: StoredEvent) -> None:
        if item.type == ev.TOOL_OUTCOME_UNKNOWN:
            self._unknown_call = str(json.loads(item.payload).get("call_id", ""))

    async def _stream(
        self, sub: Subscription | None
    ) -> AsyncGenerator[Sequence[StoredEvent | LiveItem], None]:
        """Replay up to the row, then end, mark an open cleanup tail, or (with ``sub``) go live."""
        last = self.after_seq
        marked = False  # the open-tail mark was sent (once a stream)
        while True:
            if sub is not None:
                # Resume before reading: whatever is published from here on is buffered, and what
                # was dropped while paused is in the store. The row and the first page come together.
                sub.resume()
            record, page = await self.store.read_run_and_page(self.run_id, after_seq=last, **self._bounds)
            if record is None:
                return  # gone (pruned): nothing more will come
            ended = False
            while last < record.last_seq:
                if not page.events:
                    break  # the store has fewer events than the row says (pruned)
                async with aclosing(self._replay(page)) as pages:
                    async for replayed in pages:
                        last = replayed[-1].seq
                        yield replayed
                        if replayed[-1].type == ev.CLEANUP_SETTLED:
                            return  # the tail is closed: nothing is ever appended after it
                        ended = ended or any(item.type == ev.RUN_ENDED for item in replayed)
                if last < record.last_seq:
                    page = await self.store.read_page(self.run_id, after_seq=last, **self._bounds)
            phase = Phase(record.phase)
            if ended and not phase.terminal:
                continue  # the page ran past the row: the row after run.ended says what follows
            if phase.terminal:
                tail = waiting_for(record)
                if tail is None:
                    return  # an ended run whose log is complete ends the stream, whatever after_seq was
                if not marked:
                    marked = True
                    yield [tail.to_stored(self.run_id, self._now_ms())]
                if sub is None or self.stop_at_wait:
                    return  # the answer does not wait for the tail
            elif sub is None:
                return  # a replay: what is stored, no more
            elif self.stop_at_wait and last >= record.last_seq:
                waiting = await self._waiting(record)
                if waiting is not None:
                    yield [waiting.to_stored(self.run_id, self._now_ms())]
                    return
            async with aclosing(self._live(sub, last)) as live:
                async for taken in live:
                    last = next((i.event.seq for i in reversed(taken) if i.event.seq), last)
                    yield taken
                    if taken[-1].event.type == ev.CLEANUP_SETTLED:
                        return

    async def _live(self, sub: Subscription, last: int) -> AsyncGenerator[list[LiveItem], None]:
        """Batches of live items in order after ``last``: what is buffered when the reader looks.
        Returns to let the caller re-read row and store."""
        while True:
            live = await sub.get(wait_s=self.idle_recheck_s)
            if live is None:
                return  # idle for a while, or paused: back to the store
            batch: list[LiveItem] = []
            size = 0
            back = False  # to the store (or the row) after this batch
            while live is not None:
                item = live.event
                if live.nudge:
                    if item.seq > last:
                        back = True  # committed on another replica: the store has it
                        break
                elif item.seq == 0:
                    # A delta belongs right after the event it was published after; elsewhere it
                    # would be out of order, so a follower that is not exactly there skips it.
                    if live.after_seq is None or live.after_seq == last:
                        batch.append(live)
                        size += item_bytes(item)
                elif item.seq == last + 1:
                    last = item.seq
                    self._note(item)
                    batch.append(live)
                    size += item_bytes(item)
                    if item.type in _ROW_DECIDES:
                        back = True  # the row after it says whether a tail follows (or it closed)
                        break
                    if self.stop_at_wait and item.type in _WAIT_MARKERS and not sub.buffered_events:
                        back = True  # maybe waiting now: the row decides
                        break
                elif item.seq > last:
                    back = True  # a gap: the store has it
                    break
                if len(batch) >= _MAX_BATCH_ITEMS or size >= _MAX_BATCH_BYTES:
                    break  # the rest stays buffered for the next batch
                live = sub.get_nowait()
            if batch:
                yield batch
            if back:
                return

    async def _waiting(self, record: RunRecord) -> Waiting | None:
        return await current_waiting(self.store, record, unknown_call=self._unknown_call)
