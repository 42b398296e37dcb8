"""Time formatting for event payloads; pure (the caller supplies the instant)."""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(epoch_ms: int) -> str:
    """RFC 3339 UTC text of an epoch-milliseconds instant, as proto3 JSON wants for Timestamp."""
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def parse_rfc3339_ms(text: str) -> int:
    """Inverse of :func:`rfc3339`: epoch milliseconds of an RFC 3339 UTC text."""
    return round(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
