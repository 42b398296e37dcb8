"""The event bus across replicas: local fan-out plus a run channel in Redis.

Same interface as :class:`EventBus`, so the engine and the streams do not know which they have.
A publish reaches this replica's subscribers as before and goes out on the run's channel (see
``_wire`` for what is sent: nudges for persisted events, deltas whole). The replica subscribes a
run's channel only while it has local subscribers of that run, and hands what other replicas
publish to them, within the same per-subscription bounds: nothing queues without a bound.

The link is imported lazily (it needs redis-py); this module itself does not import redis.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from agentrt.server.events._bus import EventBus, LiveItem, Subscription
from agentrt.server.events._wire import RunMessage, encode_run_message, run_channel
from agentrt.server.store import StoredEvent

__all__ = ["ChannelLink", "RedisEventBus"]


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
    ):
        super().__init__(buffer_events=buffer_events, buffer_bytes=buffer_bytes)
        self.origin = origin
        self.key_prefix = key_prefix
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
        data = encode_run_message(self.origin, run_id, items, after_seq=after_seq)
        if data is not None:
            self.link.publish(run_channel(self.key_prefix, run_id), data)

    def deliver(self, message: RunMessage) -> None:
        """Hand another replica's publish to this replica's subscribers of the run."""
        subs = self._subs.get(message.run_id)
        if not subs:
            return
        for item in message.items:
            live = LiveItem(item, nudge=True) if item.seq else LiveItem(item, message.after_seq)
            for sub in tuple(subs):
                sub.offer(live)
