"""Wakes between replicas: "a signal or cancel for your run was recorded, re-read its row now".

A replica that records a cancel or queues a signal for a run another replica owns sends that
owner a wake (through Redis, ``[redis]``). The owner's :class:`WakeInbox` hands each to the
engine (``Engine.on_wake``), which does at once what its lease renewal would do a third of a TTL
later: a pending cancel reaches the run's driver; a run it no longer holds is claimed. The
renewal stays the fallback, so a wake lost with Redis costs latency, never a fact.

A replica that gives runs' leases back while it drains (each hand-over, and what ``Engine.stop``
releases at the end) says so on the released channel; every other replica's
:class:`ReleasedInbox` hands the run ids to ``Engine.on_released``, which claims them at once (a
fenced claim: of replicas racing for a run, one wins) instead of at its next poll. The poll stays
the fallback, so a lost or refused message costs latency, never a run.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from agentrt.server.events import ChannelLink, WakeMessage
from agentrt.server.events._wire import (
    MAX_RELEASED_IDS,
    decode_released,
    encode_released,
    encode_wake,
    owner_channel,
    released_channel,
)
from agentrt.server.telemetry import log_failure

__all__ = ["ChannelWakes", "ReleaseSender", "ReleasedInbox", "WakeInbox", "WakeSender"]

log = logging.getLogger("agentrt.engine")


class WakeSender(Protocol):
    """The engine's port for waking another replica's run."""

    def wake_owner(self, run_id: str, owner: str) -> None: ...


class ReleaseSender(Protocol):
    """The engine's port for saying it gave runs' leases back (another replica may take them)."""

    def released(self, run_ids: Iterable[str]) -> None: ...


class ChannelWakes:
    """Sends wakes on each owner's channel (``{prefix}owner:{owner}``), and released runs on the
    channel every replica listens on (``{prefix}released``)."""

    def __init__(self, *, link: ChannelLink, key_prefix: str, origin: str):
        self.link = link
        self.key_prefix = key_prefix
        self.origin = origin

    def wake_owner(self, run_id: str, owner: str) -> None:
        if owner and owner != self.origin:
            self.link.publish(owner_channel(self.key_prefix, owner), encode_wake(self.origin, run_id))

    def released(self, run_ids: Iterable[str]) -> None:
        channel = released_channel(self.key_prefix)
        for message in encode_released(self.origin, run_ids):
            self.link.publish(channel, message)


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


class ReleasedInbox:
    """Runs other replicas gave back, to claim now: each run once however often named, bounded.

    Takes the released channel's messages as they came: one that does not decode (Redis may be
    shared) is dropped and counted in ``malformed``, logged at warning the first time only.
    """

    def __init__(self, *, origin: str, max_pending: int = 10_000):
        self.origin = origin  # this replica's: its own messages are not for it
        self.max_pending = max_pending
        self._pending: dict[str, None] = {}  # insertion-ordered set of run ids
        self._ready = asyncio.Event()
        self.dropped = 0  # run ids dropped when full (the poll loop still finds them)
        self.malformed = 0

    def received(self, data: bytes) -> None:
        message = decode_released(data)
        if message is None:
            self.malformed += 1
            level = logging.WARNING if self.malformed == 1 else logging.DEBUG
            log.log(
                level,
                "dropped a message on the released channel that does not decode (%d so far)",
                self.malformed,
            )
            return
        if message.origin == self.origin:
            return
        for run_id in message.run_ids:
            if run_id in self._pending:
                continue
            if len(self._pending) >= self.max_pending:
                self.dropped += 1
                continue
            self._pending[run_id] = None
        if self._pending:
            self._ready.set()

    async def run_forever(self, on_released: Callable[[list[str]], Awaitable[None]]) -> None:
        """Hand the pending run ids to ``on_released``, oldest first, up to ``MAX_RELEASED_IDS``
        at a time (one claim for a drain's batch); a failure is logged, not fatal."""
        while True:
            await self._ready.wait()
            if not self._pending:
                self._ready.clear()
                continue
            batch = list(itertools.islice(self._pending, MAX_RELEASED_IDS))
            for run_id in batch:
                del self._pending[run_id]
            try:
                await on_released(batch)
            except Exception as exc:  # the poll loop will find them; this was only the fast path
                log_failure(log, exc, "claiming released runs failed")
