"""Wakes between replicas: "a signal or cancel for your run was recorded, re-read its row now".

A replica that records a cancel or queues a signal for a run another replica owns sends that
owner a wake (through Redis, ``[redis]``). The owner's :class:`WakeInbox` hands each to the
engine (``Engine.on_wake``), which does at once what its lease renewal would do a third of a TTL
later: a pending cancel reaches the run's driver; a run it no longer holds is claimed. The
renewal stays the fallback, so a wake lost with Redis costs latency, never a fact.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from agentrt.server.events import ChannelLink, WakeMessage
from agentrt.server.events._wire import encode_wake, owner_channel
from agentrt.server.telemetry import log_failure

__all__ = ["ChannelWakes", "WakeInbox", "WakeSender"]

log = logging.getLogger("agentrt.engine")


class WakeSender(Protocol):
    """The engine's port for waking another replica's run."""

    def wake_owner(self, run_id: str, owner: str) -> None: ...


class ChannelWakes:
    """Sends wakes on each owner's channel (``{prefix}owner:{owner}``)."""

    def __init__(self, *, link: ChannelLink, key_prefix: str, origin: str):
        self.link = link
        self.key_prefix = key_prefix
        self.origin = origin

    def wake_owner(self, run_id: str, owner: str) -> None:
        if owner and owner != self.origin:
            self.link.publish(owner_channel(self.key_prefix, owner), encode_wake(self.origin, run_id))


class WakeInbox:
    """Wakes received for this replica, each run once however often it was woken, bounded."""

    def __init__(self, *, max_pending: int = 10_000):
        self.max_pending = max_pending
        self._pending: dict[str, None] = {}  # insertion-ordered set of run ids
        self._ready = asyncio.Event()
        self.dropped = 0  # wakes dropped when full (renewals still carry what they meant)

    def received(self, message: WakeMessage) -> None:
        if message.run_id in self._pending:
            return
        if len(self._pending) >= self.max_pending:
            self.dropped += 1
            return
        self._pending[message.run_id] = None
        self._ready.set()

    async def run_forever(self, on_wake: Callable[[str], Awaitable[None]]) -> None:
        """Hand each pending run id to ``on_wake``, oldest first; a failure is logged, not fatal."""
        while True:
            await self._ready.wait()
            if not self._pending:
                self._ready.clear()
                continue
            run_id = next(iter(self._pending))
            del self._pending[run_id]
            try:
                await on_wake(run_id)
            except Exception as exc:  # the renew loop will see it; this was only the fast path
                log_failure(log, exc, "acting on a wake failed")
