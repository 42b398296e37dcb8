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
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from typing import Any, TypeVar, overload

from agentrt.server.api._streams import Follower
from agentrt.server.core import OverLimit
from agentrt.server.store import StoredEvent

log = logging.getLogger("agentrt.api")
T = TypeVar("T")


class FollowerStalled(OverLimit):
    """A stream reader left its buffer full for longer than ``streams.stall_timeout_s``."""

    reason = "FOLLOWER_STALLED"


@overload
async def send_events(
    follower: Follower,
    write: Callable[[StoredEvent], Awaitable[Any]],
    *,
    stall_timeout_s: float,
    clock: Callable[[], float] = ...,
) -> None: ...


@overload
async def send_events(
    follower: Follower,
    write: Callable[[T], Awaitable[Any]],
    *,
    convert: Callable[[StoredEvent], T],
    stall_timeout_s: float,
    clock: Callable[[], float] = ...,
) -> None: ...


async def send_events(
    follower: Follower,
    write: Callable[[Any], Awaitable[Any]],
    *,
    convert: Callable[[StoredEvent], Any] | None = None,
    stall_timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Write every item of ``follower`` with ``write`` (one gRPC message each) until it ends.

    Args:
        follower: The stream's follower.
        write: Sends one item (``convert``'s result, or the stored event without it).
        convert: Makes the message of an item; a live item's is made once for all followers
            (see :meth:`Follower.messages`), so ``write`` must not modify it.
        stall_timeout_s: How long a write may stay pending with the buffer full.
        clock: Monotonic seconds.

    Raises:
        FollowerStalled: the reader left a write pending for ``stall_timeout_s`` while its
            buffer was full.
    """
    items = follower.events() if convert is None else follower.messages(convert)
    await _write_all(follower, items, write, stall_timeout_s, clock)


async def send_event_batches(
    follower: Follower,
    write: Callable[[list[T]], Awaitable[Any]],
    *,
    convert: Callable[[StoredEvent], T],
    stall_timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """:func:`send_events`, one message per batch of items (see ``Follower.message_batches``)."""
    await _write_all(follower, follower.message_batches(convert), write, stall_timeout_s, clock)


async def _write_all(
    follower: Follower,
    items: AsyncGenerator[Any, None],
    write: Callable[[Any], Awaitable[Any]],
    stall_timeout_s: float,
    clock: Callable[[], float],
) -> None:
    watchdog = _StallWatchdog(follower, stall_timeout_s, clock)
    try:
        async with aclosing(items):
            async for item in items:
                await watchdog.write(write(item))
    finally:
        watchdog.close()


class _StallWatchdog:
    """Cancels the sending task once its pending write has been stuck with the buffer full.

    A write is stuck when it is still pending ``stall_timeout_s`` after both its start and the
    moment the follower's buffer filled. Each write is awaited in the sending task itself (a task
    and a wait per item cost more than the rest of sending it); one timer per stream looks at the
    pending write, never later than the moment it would be stuck: a write started or a buffer
    filled after a look cannot be stuck before ``stall_timeout_s`` after that look.
    """

    def __init__(self, follower: Follower, stall_timeout_s: float, clock: Callable[[], float]):
        self._follower = follower
        self._timeout = stall_timeout_s
        self._clock = clock
        self._task = asyncio.current_task()
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        self._started: float | None = None  # when the pending write began; None between writes
        self._fired = False

    async def write(self, pending: Awaitable[Any]) -> None:
        self._started = started = self._clock()
        if self._timer is None:
            self._look_at(started + self._timeout)
        try:
            await pending
        except asyncio.CancelledError:
            if not self._fired:
                raise
            assert self._task is not None
            self._task.uncancel()
            # gRPC still delivers a message already handed over, then the status that follows it.
            raise FollowerStalled(
                f"the stream's reader left its buffer full for {self._timeout:g}s; "
                f"resume with StreamRunEvents after the last seq received",
                metadata={"run_id": self._follower.run_id, "stall_timeout_s": f"{self._timeout:g}"},
            ) from None
        finally:
            self._started = None

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _look_at(self, when: float) -> None:
        self._timer = self._loop.call_later(max(0.0, when - self._clock()), self._look)

    def _look(self) -> None:
        self._timer = None
        now = self._clock()
        started, full_since = self._started, self._follower.full_since()
        if started is None:
            return  # between writes: the next write looks again
        if full_since is None:
            self._look_at(now + self._timeout)
            return
        stuck_at = max(started, full_since) + self._timeout
        if stuck_at > now:
            self._look_at(stuck_at)
            return
        log.warning("run %s: dropping a stream reader that stopped reading", self._follower.run_id)
        self._fired = True
        if self._task is not None:
            self._task.cancel()
