"""Event bus: live fan-out of committed run events."""

from __future__ import annotations

from runtime_server.events._bus import EventBus, Subscription

__all__ = ["EventBus", "Subscription"]
