"""In-process event bus: live fan-out of committed events (and best-effort deltas).

The bus is a wake-up path only; the database is the truth (R8.1). A subscriber
has a bounded queue: when a slow reader lets it fill, the bus drops further
items and marks the subscription ``lagged`` instead of blocking the run (R8.2);
the reader then refills the gap from the store.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable

from runtime_server.store import StoredEvent


class Subscription:
    """Live events of one run for one reader."""

    def __init__(self, run_id: str, maxsize: int):
        self.run_id = run_id
        self.queue: asyncio.Queue[StoredEvent] = asyncio.Queue(maxsize=maxsize)
        self.lagged = False

    def offer(self, item: StoredEvent) -> None:
        if self.lagged:
            return
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            self.lagged = True


class EventBus:
    """Fan-out of one process's committed events to its stream readers."""

    def __init__(self, *, queue_size: int = 1024):
        self._queue_size = queue_size
        self._subs: defaultdict[str, set[Subscription]] = defaultdict(set)

    def subscribe(self, run_id: str) -> Subscription:
        sub = Subscription(run_id, self._queue_size)
        self._subs[run_id].add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        subs = self._subs.get(sub.run_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[sub.run_id]

    def publish(self, run_id: str, items: Iterable[StoredEvent]) -> None:
        """Hand items to every subscriber of the run; never blocks, never raises."""
        subs = self._subs.get(run_id)
        if not subs:
            return
        for item in items:
            for sub in tuple(subs):
                sub.offer(item)

    def subscriber_count(self, run_id: str) -> int:
        return len(self._subs.get(run_id, ()))
