"""Sending a :class:`Follower`'s items to one gRPC stream, dropping a reader that stopped reading.

gRPC's ``context.write`` waits while the peer's HTTP/2 window is full, that is while
the client does not read. The follower stops buffering then (its buffer is bounded),
and a write that stays pending for ``stall_timeout_s`` after the buffer filled ends
the stream with RESOURCE_EXHAUSTED, reason ``FOLLOWER_STALLED``. A replay page waiting
to be sent counts as a full buffer. A reader that is merely slow completes writes,
so it is never dropped; it falls back to the store instead (see ``_streams``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from typing import Any

from agentrt.server.api._streams import Follower
from agentrt.server.core import OverLimit
from agentrt.server.store import StoredEvent

log = logging.getLogger("agentrt.api")


class FollowerStalled(OverLimit):
    """A stream reader left its buffer full for longer than ``streams.stall_timeout_s``."""

    reason = "FOLLOWER_STALLED"


async def send_events(
    follower: Follower,
    write: Callable[[StoredEvent], Awaitable[Any]],
    *,
    stall_timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Write every item of ``follower`` with ``write`` (one gRPC message each) until it ends.

    Raises:
        FollowerStalled: the reader left a write pending for ``stall_timeout_s`` while its
            buffer was full.
    """
    async with aclosing(follower.events()) as items:
        async for item in items:
            await _guarded(write(item), follower, stall_timeout_s, clock)


async def _guarded(
    write: Awaitable[Any], follower: Follower, stall_timeout_s: float, clock: Callable[[], float]
) -> None:
    task = asyncio.ensure_future(write)
    started = clock()
    try:
        while not task.done():
            full_since = follower.full_since()
            if full_since is None:
                waits: set[asyncio.Future[Any]] = {task}
                if follower.sub is not None:
                    waits.add(follower.sub.full_signal())
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                continue
            remaining = max(started, full_since) + stall_timeout_s - clock()
            if remaining <= 0:
                log.warning("run %s: dropping a stream reader that stopped reading", follower.run_id)
                raise FollowerStalled(
                    f"the stream's reader left its buffer full for {stall_timeout_s:g}s; "
                    f"resume with StreamRunEvents after the last seq received",
                    metadata={"run_id": follower.run_id, "stall_timeout_s": f"{stall_timeout_s:g}"},
                )
            await asyncio.wait({task}, timeout=remaining)
        task.result()
    finally:
        if not task.done():
            # gRPC still delivers a message already handed over, then the status that follows it.
            task.cancel()
