"""Event bus: live fan-out of committed run events (in process, or across replicas via Redis)."""

from __future__ import annotations

from agentrt.server.events._bus import EventBus, LiveItem, Subscription, item_bytes
from agentrt.server.events._fanout import ChannelLink, RedisEventBus
from agentrt.server.events._wire import ReleasedMessage, RunMessage, WakeMessage

__all__ = [
    "ChannelLink",
    "EventBus",
    "LiveItem",
    "RedisEventBus",
    "ReleasedMessage",
    "RunMessage",
    "Subscription",
    "WakeMessage",
    "item_bytes",
]
