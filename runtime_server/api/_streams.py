"""Replay-then-follow of a run's events: no gap, no duplicate (R8.1, R8.2).

Subscribe to the live bus first, then read the store, so nothing committed in
between is missed; live items at or below the last delivered seq are dropped,
and a gap (or a lagged subscription) sends the reader back to the store. A
bounded wait re-reads the store too, which covers events another replica wrote.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from runtime_server.core import events as ev
from runtime_server.events import EventBus
from runtime_server.store import Store, StoredEvent

_PAGE = 500


async def follow_events(
    store: Store,
    bus: EventBus,
    run_id: str,
    *,
    after_seq: int,
    follow: bool,
    idle_recheck_s: float = 1.0,
    stop_on_pause: bool = False,
) -> AsyncIterator[StoredEvent]:
    """Yield persisted events after ``after_seq``; with ``follow``, live ones too until run.ended.

    With ``stop_on_pause`` the stream also ends at approval.requested: RunAgent ends when the
    run pauses for a person. Live text deltas (seq 0) pass through and are never replayed.
    """
    last_types = {ev.RUN_ENDED, ev.APPROVAL_REQUESTED} if stop_on_pause else {ev.RUN_ENDED}
    sub = bus.subscribe(run_id) if follow else None
    last = after_seq
    try:
        while True:
            page = await store.read_events(run_id, after_seq=last, limit=_PAGE)
            for item in page:
                yield item
                last = item.seq
                if item.type in last_types:
                    return
            if len(page) == _PAGE:
                continue
            if sub is None:
                return
            if sub.lagged:
                bus.unsubscribe(sub)
                sub = bus.subscribe(run_id)
                continue
            while True:
                try:
                    item = await asyncio.wait_for(sub.queue.get(), timeout=idle_recheck_s)
                except TimeoutError:
                    break
                if item.seq == 0:
                    yield item
                    continue
                if item.seq <= last:
                    continue
                if item.seq != last + 1:
                    break
                yield item
                last = item.seq
                if item.type in last_types:
                    return
                if sub.lagged:
                    break
    finally:
        if sub is not None:
            bus.unsubscribe(sub)
