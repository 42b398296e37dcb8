"""The event bus across replicas: local fan-out plus a run channel in Redis.

Same interface as :class:`EventBus`, so the engine and the streams do not know which they have.
A publish reaches this replica's subscribers as before and goes out on the run's channel (see
``_wire`` for what is sent: nudges for persisted events, deltas whole). The replica subscribes a
run's channel only while it has local subscribers of that run, and hands what other replicas
publish to them, within the same per-subscription bounds: nothing queues without a bound.

Most runs have no follower on another replica, and a publish costs the owner a Redis round trip:
when a publish of a run reached nobody else (``PUBLISH`` counts receivers), the run goes *quiet*
and its publishes stay local, until a replica announces it now listens on the run's channel
(the interest channel) or ``quiet_s`` passes, whichever comes first. A follower that joins
misses at most the deltas published in the moment before its announcement arrives; persisted
events it reads from the store in any case.

The link is imported lazily (it needs redis-py); this module itself does not import redis.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Protocol

from agentrt.server.events._bus import EventBus, LiveItem, Subscription
from agentrt.server.events._wire import RunMessage, encode_run_message, run_channel
from agentrt.server.store import StoredEvent

__all__ = ["ChannelLink", "RedisEventBus"]

QUIET_S = 2.0  # how long a run nobody else heard stays local without an announcement
MAX_QUIET_RUNS = 100_000


class ChannelLink(Protocol):
    """What the bus needs of the Redis link (``events._redis.RedisLink``)."""

    def want(self, channel: str) -> None: ...
    def unwant(self, channel: str) -> None: ...
    def publish(self, channel: str, data: bytes) -> None: ...


class RedisEventBus(EventBus):
    """An :class:`EventBus` whose publishes also reach the subscribers of other replicas."""

    def __init__(
        self,
        *,
        origin: str,
        key_prefix: str,
        buffer_events: int = 256,
        buffer_bytes: int = 4 * 1024 * 1024,
        quiet_s: float = QUIET_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        super().__init__(buffer_events=buffer_events, buffer_bytes=buffer_bytes)
        self.origin = origin
        self.key_prefix = key_prefix
        self.quiet_s = quiet_s
        self._clock = clock
        self._quiet: dict[str, float] = {}  # run id -> until when its publishes stay local
        self.link: ChannelLink | None = None  # attached once the link exists (it calls back into us)

    def attach(self, link: ChannelLink) -> None:
        self.link = link
        for run_id in self._subs:
            link.want(run_channel(self.key_prefix, run_id))

    def subscribe(
        self, run_id: str, *, max_events: int | None = None, max_bytes: int | None = None
    ) -> Subscription:
        sub = super().subscribe(run_id, max_events=max_events, max_bytes=max_bytes)
        if self.link is not None and self.subscriber_count(run_id) == 1:
            self.link.want(run_channel(self.key_prefix, run_id))
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        super().unsubscribe(sub)
        if self.link is not None and not self.subscriber_count(sub.run_id):
            self.link.unwant(run_channel(self.key_prefix, sub.run_id))

    def publish(self, run_id: str, items: Iterable[StoredEvent], *, after_seq: int | None = None) -> None:
        items = tuple(items)
        super().publish(run_id, items, after_seq=after_seq)
        if self.link is None:
            return
        until = self._quiet.get(run_id)
        if until is not None:
            if self._clock() < until:
                return  # nobody else listens
            del self._quiet[run_id]
        data = encode_run_message(self.origin, run_id, items, after_seq=after_seq)
        if data is not None:
            self.link.publish(run_channel(self.key_prefix, run_id), data)

    def unheard(self, run_id: str) -> None:
        """A publish of ``run_id`` reached no other replica: keep its next ones local for a while."""
        if run_id not in self._quiet and len(self._quiet) >= MAX_QUIET_RUNS:
            del self._quiet[next(iter(self._quiet))]  # the oldest: it only publishes once more
        self._quiet[run_id] = self._clock() + self.quiet_s

    def heard(self, run_id: str) -> None:
        """Another replica now listens on ``run_id``'s channel: publish it again."""
        self._quiet.pop(run_id, None)

    def deliver(self, message: RunMessage) -> None:
        """Hand another replica's publish to this replica's subscribers of the run."""
        subs = self._subs.get(message.run_id)
        if not subs:
            return
        for item in message.items:
            live = LiveItem(item, nudge=True) if item.seq else LiveItem(item, message.after_seq)
            for sub in tuple(subs):
                sub.offer(live)
