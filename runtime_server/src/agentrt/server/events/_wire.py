"""What crosses Redis: channel names and the JSON of the two message kinds.

- A run's channel (``{prefix}run:{run_id}``) carries what its owner published after a commit:
  for a persisted event only its seq (a *nudge*: the follower reads the event itself from the
  store, which stays the truth), and live-only deltas whole, stamped with ``after_seq``.
- An owner's channel (``{prefix}owner:{owner}``) carries wakes: "a signal or cancel for this run
  was recorded; re-read its row now".
- The interest channel (``{prefix}interest``) says "this replica now listens on the channel of
  this run": an owner that stopped publishing a run nobody heard (``PUBLISH`` answered 0
  receivers) publishes it again.
- The released channel (``{prefix}released``) says "this replica gave these runs' leases back"
  (a drain): every other replica with room claims them now instead of at its next poll.

Every message names the replica that sent it (``origin``), so a replica skips its own. A message
that does not decode is dropped: Redis may be shared, and nothing from it is trusted as a fact.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agentrt.server.store import StoredEvent

__all__ = [
    "MAX_RELEASED_IDS",
    "ReleasedMessage",
    "RunMessage",
    "WakeMessage",
    "decode_interest",
    "decode_released",
    "decode_run_message",
    "decode_wake",
    "encode_interest",
    "encode_released",
    "encode_run_message",
    "encode_wake",
    "interest_channel",
    "owner_channel",
    "released_channel",
    "run_channel",
    "run_of_channel",
]

_MAX_ID_CHARS = 256
MAX_RELEASED_IDS = 100  # run ids per released message: a drain of more sends several


def run_channel(prefix: str, run_id: str) -> str:
    return f"{prefix}run:{run_id}"


def owner_channel(prefix: str, owner: str) -> str:
    return f"{prefix}owner:{owner}"


def interest_channel(prefix: str) -> str:
    return f"{prefix}interest"


def released_channel(prefix: str) -> str:
    return f"{prefix}released"


def run_of_channel(prefix: str, channel: str) -> str | None:
    """The run id of a run channel's name, or None for another channel."""
    head = f"{prefix}run:"
    return channel[len(head) :] if channel.startswith(head) else None


@dataclass(frozen=True, slots=True)
class RunMessage:
    """One publish of a run's owner: persisted seqs (nudges) and live-only items."""

    origin: str
    run_id: str
    items: tuple[StoredEvent, ...]  # seq > 0: a nudge (type and payload empty); seq 0: a delta
    after_seq: int | None


@dataclass(frozen=True, slots=True)
class WakeMessage:
    origin: str
    run_id: str


@dataclass(frozen=True, slots=True)
class ReleasedMessage:
    """Runs whose leases ``origin`` gave back, free for any replica to claim."""

    origin: str
    run_ids: tuple[str, ...]


def encode_run_message(
    origin: str, run_id: str, items: Iterable[StoredEvent], *, after_seq: int | None
) -> bytes | None:
    """The message for one publish, or None when it carries nothing worth sending."""
    out: list[Any] = []
    for item in items:
        if item.seq:
            out.append(item.seq)  # a nudge: the store has the event
        else:
            out.append([item.type, item.payload, item.created_ms])
    if not out:
        return None
    return json.dumps({"o": origin, "r": run_id, "a": after_seq, "i": out}, separators=(",", ":")).encode()


def decode_run_message(data: bytes) -> RunMessage | None:
    """The message, or None when ``data`` is not one of ours."""
    try:
        raw = json.loads(data)
        origin, run_id, after_seq, items = raw["o"], raw["r"], raw["a"], raw["i"]
        if not (_an_id(origin) and _an_id(run_id) and isinstance(items, list)):
            return None
        if after_seq is not None and not _a_seq(after_seq):
            return None
        decoded: list[StoredEvent] = []
        for item in items:
            if _a_seq(item) and item > 0:
                decoded.append(StoredEvent(run_id, item, "", "", 0))
            elif isinstance(item, list) and len(item) == 3:
                event_type, payload, created_ms = item
                if not (isinstance(event_type, str) and isinstance(payload, str) and _a_seq(created_ms)):
                    return None
                decoded.append(StoredEvent(run_id, 0, event_type, payload, created_ms))
            else:
                return None
    except (ValueError, KeyError, TypeError):
        return None
    return RunMessage(origin, run_id, tuple(decoded), after_seq)


def encode_wake(origin: str, run_id: str) -> bytes:
    return json.dumps({"o": origin, "w": run_id}, separators=(",", ":")).encode()


def decode_wake(data: bytes) -> WakeMessage | None:
    try:
        raw = json.loads(data)
        origin, run_id = raw["o"], raw["w"]
    except (ValueError, KeyError, TypeError):
        return None
    if not (_an_id(origin) and _an_id(run_id)):
        return None
    return WakeMessage(origin, run_id)


def encode_interest(origin: str, run_id: str) -> bytes:
    return json.dumps({"o": origin, "n": run_id}, separators=(",", ":")).encode()


def decode_interest(data: bytes) -> WakeMessage | None:
    """Who now listens on which run (the same two fields as a wake)."""
    try:
        raw = json.loads(data)
        origin, run_id = raw["o"], raw["n"]
    except (ValueError, KeyError, TypeError):
        return None
    if not (_an_id(origin) and _an_id(run_id)):
        return None
    return WakeMessage(origin, run_id)


def encode_released(origin: str, run_ids: Iterable[str]) -> list[bytes]:
    """The messages naming ``run_ids`` (each once), at most ``MAX_RELEASED_IDS`` to a message."""
    ids = list(dict.fromkeys(run_ids))
    return [
        json.dumps({"o": origin, "x": ids[i : i + MAX_RELEASED_IDS]}, separators=(",", ":")).encode()
        for i in range(0, len(ids), MAX_RELEASED_IDS)
    ]


def decode_released(data: bytes) -> ReleasedMessage | None:
    try:
        raw = json.loads(data)
        origin, run_ids = raw["o"], raw["x"]
    except (ValueError, KeyError, TypeError):
        return None
    if not (_an_id(origin) and isinstance(run_ids, list) and 0 < len(run_ids) <= MAX_RELEASED_IDS):
        return None
    if not all(_an_id(run_id) for run_id in run_ids):
        return None
    return ReleasedMessage(origin, tuple(run_ids))


def _an_id(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= _MAX_ID_CHARS


def _a_seq(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
