"""In-process event bus: live fan-out of committed events (and best-effort deltas).

The bus is a wake-up path only; the database is the truth (R8.1). Each subscriber
has a buffer bounded in events and in bytes. When a reader that does not keep up
fills it, the subscription is *paused*: further items are dropped, never queued,
and the run is never blocked (R8.2). The reader drains what it holds, refills the
gap from the store and :meth:`Subscription.resume` s. Persisted events reach every
subscriber as the same object, so many subscribers of one run share its payloads.

A live-only item (a model text delta, seq 0) is stamped with the seq of the last
persisted event before it (``after_seq``), so a reader can tell whether the delta
still belongs where it stands in its own sequence.

With ``[redis]`` on, :class:`~agentrt.server.events.RedisEventBus` extends this bus across
replicas: what a run's owner publishes elsewhere arrives as deltas and *nudges* (a seq the
store now has, without content: persisted facts are only ever read from the store).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agentrt.server.store import StoredEvent

T = TypeVar("T")

# Rough per-item overhead (object headers, deque slot) added to the payload when counting bytes.
ITEM_OVERHEAD_BYTES = 128


def item_bytes(item: StoredEvent) -> int:
    """What one buffered item counts against a byte bound (payload characters plus overhead)."""
    return len(item.payload) + len(item.type) + ITEM_OVERHEAD_BYTES


@dataclass(frozen=True, slots=True)
class LiveItem:
    """One buffered item: a persisted event (seq > 0) or a live-only one stamped with its position."""

    event: StoredEvent
    after_seq: int | None = None  # live-only items: seq of the last persisted event before it, if known
    # From another replica (events/_fanout): "the store has the event of this seq", no content.
    nudge: bool = False
    # (converter, what it made of ``event``): the first reader's conversion, reused by the others.
    _encoded: tuple[Callable[[StoredEvent], Any], Any] | None = field(
        default=None, init=False, compare=False, repr=False
    )

    def encoded(self, convert: Callable[[StoredEvent], T]) -> T:
        """``convert(self.event)``, computed once per item and converter, shared by every reader.

        Readers must treat the result as immutable. The first reader converts, so an item no
        reader sends (filtered out, or dropped) costs nothing.
        """
        cached = self._encoded
        if cached is not None and cached[0] is convert:
            value: T = cached[1]
            return value
        value = convert(self.event)
        object.__setattr__(self, "_encoded", (convert, value))  # a cache: the item stays a value
        return value


class Subscription:
    """Live events of one run for one reader, in a buffer bounded by ``max_events`` and ``max_bytes``."""

    def __init__(
        self,
        run_id: str,
        *,
        max_events: int,
        max_bytes: int,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.run_id = run_id
        self.max_events = max_events
        self.max_bytes = max_bytes
        self._clock = clock
        self._items: deque[LiveItem] = deque()
        self._bytes = 0
        self._waiter: asyncio.Future[None] | None = None
        self._full_waiter: asyncio.Future[None] | None = None
        self.paused_since: float | None = None  # when the buffer filled up; None while it takes items
        self.dropped = 0  # items dropped while paused, over the subscription's life

    # -- the bus's side -----------------------------------------------------------------------------

    def offer(self, item: LiveItem) -> None:
        """Buffer ``item`` unless paused; a full buffer pauses the subscription (never blocks)."""
        if self.paused_since is not None:
            self.dropped += 1
            return
        size = item_bytes(item.event)
        if len(self._items) >= self.max_events or self._bytes + size > self.max_bytes:
            self.paused_since = self._clock()
            self.dropped += 1
            _wake(self._full_waiter)
            self._full_waiter = None
        else:
            self._items.append(item)
            self._bytes += size
        _wake(self._waiter)
        self._waiter = None

    # -- the reader's side --------------------------------------------------------------------------

    @property
    def paused(self) -> bool:
        """True once the buffer filled up: items are being dropped until :meth:`resume`."""
        return self.paused_since is not None

    @property
    def lagged(self) -> bool:
        """Same as :attr:`paused`: the reader must refill from the store before trusting the queue."""
        return self.paused_since is not None

    @property
    def buffered_events(self) -> int:
        return len(self._items)

    @property
    def buffered_bytes(self) -> int:
        return self._bytes

    def get_nowait(self) -> LiveItem | None:
        """The oldest buffered item, or None when the buffer is empty."""
        if not self._items:
            return None
        item = self._items.popleft()
        self._bytes -= item_bytes(item.event)
        return item

    async def get(self, wait_s: float | None = None) -> LiveItem | None:
        """The oldest item, waiting up to ``wait_s`` seconds; None on timeout or when paused and empty."""
        item = self.get_nowait()
        if item is not None or self.paused:
            return item
        waiter = self._waiter
        loop = asyncio.get_running_loop()
        if waiter is None or waiter.done():
            waiter = self._waiter = loop.create_future()
        # One timer per wait that wakes the waiter, not wait_for + shield (a task and a timer per
        # event). The waiter is this reader's alone, so a cancelled get may cancel it: the next
        # get makes a new one. A timeout is a wake-up with nothing buffered.
        timer = loop.call_later(wait_s, _wake, waiter) if wait_s is not None else None
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
        return self.get_nowait()

    def drain(self) -> None:
        """Drop what is buffered and resume: for readers that only want a wake-up."""
        self._items.clear()
        self._bytes = 0
        self.paused_since = None

    def resume(self) -> None:
        """Take items again (the reader is about to refill what was dropped from the store)."""
        self.paused_since = None

    def full_signal(self) -> asyncio.Future[None]:
        """A future that completes when the buffer fills up (at once if it is full already)."""
        waiter = self._full_waiter
        if waiter is None or waiter.done():
            waiter = self._full_waiter = asyncio.get_running_loop().create_future()
        if self.paused:
            _wake(waiter)
        return waiter

    def close(self) -> None:
        """Drop everything held (the reader is gone); a pending :meth:`get` returns None."""
        self._items.clear()
        self._bytes = 0
        # Woken, not cancelled: a CancelledError in a task nobody cancelled would look like its
        # caller going away.
        _wake(self._waiter)
        if self._full_waiter is not None and not self._full_waiter.done():
            self._full_waiter.cancel()
        self._waiter = self._full_waiter = None


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


class EventBus:
    """Fan-out of one process's committed events to its stream readers."""

    def __init__(self, *, buffer_events: int = 256, buffer_bytes: int = 4 * 1024 * 1024):
        self._buffer_events = buffer_events
        self._buffer_bytes = buffer_bytes
        self._subs: defaultdict[str, set[Subscription]] = defaultdict(set)

    def subscribe(
        self, run_id: str, *, max_events: int | None = None, max_bytes: int | None = None
    ) -> Subscription:
        """A new subscription of ``run_id``; synchronous, so a caller can subscribe before any await."""
        sub = Subscription(
            run_id,
            max_events=max_events or self._buffer_events,
            max_bytes=max_bytes or self._buffer_bytes,
        )
        self._subs[run_id].add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        sub.close()
        subs = self._subs.get(sub.run_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[sub.run_id]

    def publish(self, run_id: str, items: Iterable[StoredEvent], *, after_seq: int | None = None) -> None:
        """Hand items to every subscriber of the run; never blocks, never raises.

        Args:
            run_id: The run the items belong to.
            items: Persisted events (seq > 0) in seq order, or live-only items (seq 0).
            after_seq: For live-only items, the seq of the last persisted event before them.
        """
        subs = self._subs.get(run_id)
        if not subs:
            return
        for item in items:
            live = LiveItem(item, after_seq if item.seq == 0 else None)
            for sub in tuple(subs):
                sub.offer(live)

    def follower_count(self) -> int:
        """Open subscriptions over all runs (a metrics gauge)."""
        return sum(len(subs) for subs in self._subs.values())

    def subscriber_count(self, run_id: str) -> int:
        return len(self._subs.get(run_id, ()))
