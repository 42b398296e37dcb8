"""Event bus: live fan-out of committed run events."""

from __future__ import annotations

from agentrt.server.events._bus import EventBus, LiveItem, Subscription, item_bytes

__all__ = ["EventBus", "LiveItem", "Subscription", "item_bytes"]
