"""Decisions of the Redis fan-out link: when its state changed, and how long to wait to reconnect.

The link reports each probe's result (up or not); this says whether that is a transition worth
one log line and one count, so a flapping or long outage logs per transition, never per message.
"""

from __future__ import annotations

import enum

from agentrt.server.core._deadline import backoff_delay_s


class LinkChange(enum.Enum):
    """What a probe's result means for the link."""

    WENT_DOWN = "went_down"  # from now on the store alone carries events and signals
    CAME_UP = "came_up"  # Redis carries them again (the store still backs every fact)


def link_change(*, was_up: bool | None, up: bool) -> LinkChange | None:
    """The transition ``up`` makes after ``was_up`` (None: no probe yet), or None for no change.

    The first probe failing is a transition (the replica starts on store polling); the first
    succeeding is one too (the log says the fan-out is on).
    """
    if was_up is up:
        return None
    return LinkChange.CAME_UP if up else LinkChange.WENT_DOWN


def reconnect_delay_s(*, failures: int, base_s: float, cap_s: float, rand: float) -> float:
    """The wait before the next connection attempt after ``failures`` in a row (full jitter).

    Never zero: a server that accepts and drops at once must not be hammered in a tight loop.
    """
    return max(base_s / 10, backoff_delay_s(attempt=failures, base_s=base_s, cap_s=cap_s, rand=rand))
