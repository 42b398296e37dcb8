"""Time formatting for event payloads; pure (the caller supplies the instant)."""

from __future__ import annotations

import functools
from datetime import UTC, datetime


def rfc3339(epoch_ms: int) -> str:
    """RFC 3339 UTC text of an epoch-milliseconds instant, as proto3 JSON wants for Timestamp.

    Integer arithmetic: the milliseconds are exact at any instant a Timestamp holds (a float
    of the seconds is not, far from 1970). The events of a step share their second, so its text
    is made once.
    """
    seconds, millis = divmod(epoch_ms, 1000)
    return f"{_second(seconds)}.{millis:03d}Z"


@functools.lru_cache(maxsize=64)
def _second(epoch_s: int) -> str:
    d = datetime.fromtimestamp(epoch_s, tz=UTC)
    return f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{d.hour:02d}:{d.minute:02d}:{d.second:02d}"


def parse_rfc3339_ms(text: str) -> int:
    """Inverse of :func:`rfc3339`: epoch milliseconds of an RFC 3339 UTC text."""
    return round(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
