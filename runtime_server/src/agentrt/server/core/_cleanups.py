"""Cleanups (S002 §8): what a run must release when it ends, read from tool results. Pure.

A tool registers a cleanup by returning a JSON object with the reserved member ``"_cleanup"``:
one request or a list of them, each ``{"tool": <name>, "arguments": {...}}`` (a call of a tool of
the same tool host, made when the run ends) or ``{"hook": <name>, "arguments": {...}}`` (the
server's ``agentrt_cleanup`` hook). Child runs are registered by the engine when it starts them.

When the run's end is decided it goes to CLEANING_UP (``run.closing``) and runs the cleanups
newest first, each with a few attempts under one deadline, then commits the end. A cleanup
that fails for good leaves the run's cleanup status UNKNOWN for the background job.

A request is registered whole or refused whole (``cleanup.registered`` with the reason; the run
goes on) when it is not an object or list of objects of that shape, names a tool or hook that
is not a plain name, has arguments past :data:`MAX_ARGUMENTS_BYTES`, or would give the run more
than :data:`MAX_CLEANUPS_PER_RUN` cleanups. The engine refuses further what only it can check
(a tool that is not served, needs approval, or lives on another host).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from agentrt.server.core import _events as ev
from agentrt.server.core._json import object_with_members

__all__ = [
    "CLEANUP_MEMBER",
    "MAX_ARGUMENTS_BYTES",
    "MAX_CLEANUPS_PER_RESULT",
    "MAX_CLEANUPS_PER_RUN",
    "CleanupRequest",
    "CleanupStatus",
    "cleanup_key",
    "cleanups_requested",
]

CLEANUP_MEMBER = "_cleanup"
MAX_CLEANUPS_PER_RESULT = 8
MAX_CLEANUPS_PER_RUN = 64
MAX_ARGUMENTS_BYTES = 4096

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)*\Z")


class CleanupStatus(StrEnum):
    """Where a run's cleanups stand; the value is what the row stores ("" for none registered)."""

    NONE = ""
    PENDING = "PENDING"
    DONE = "DONE"
    UNKNOWN = "UNKNOWN"  # a cleanup failed for good: its resource may still exist


@dataclass(frozen=True, slots=True)
class CleanupRequest:
    """One cleanup a result asks for: what releases it, and its arguments as canonical JSON."""

    kind: ev.CleanupKind
    target: str
    arguments_json: str


def cleanup_key(run_id: str, cleanup_id: str) -> str:
    """The idempotency key of a cleanup's tool call: the same for every attempt, by any owner."""
    return f"cleanup:{run_id}:{cleanup_id}"


def cleanups_requested(result_json: str, *, registered: int) -> Sequence[CleanupRequest] | str | None:
    """The cleanups a tool result asks for.

    Args:
        result_json: The result as the tool host recorded it.
        registered: Cleanups the run has registered so far.

    Returns:
        None when the result does not ask (not an object, or no ``_cleanup`` member); the
        requests; or, for a request that is refused whole, the reason.
    """
    result = object_with_members(result_json, (CLEANUP_MEMBER,))
    if result is None:
        return None
    asked = result[CLEANUP_MEMBER]
    items = asked if isinstance(asked, list) else [asked]
    if not items:
        return "cleanup refused: an empty list"
    if len(items) > MAX_CLEANUPS_PER_RESULT:
        return f"cleanup refused: {len(items)} asked for in one result; at most {MAX_CLEANUPS_PER_RESULT}"
    if registered + len(items) > MAX_CLEANUPS_PER_RUN:
        return f"cleanup refused: the run would have more than {MAX_CLEANUPS_PER_RUN} cleanups"
    requests: list[CleanupRequest] = []
    for item in items:
        request = _request(item)
        if isinstance(request, str):
            return f"cleanup refused: {request}"
        requests.append(request)
    return requests


def _request(item: object) -> CleanupRequest | str:
    if not isinstance(item, dict):
        return 'each cleanup is an object {"tool" or "hook": name, "arguments": {...}}'
    unknown = item.keys() - {"tool", "hook", "arguments"}
    if unknown:
        return f"unknown members {sorted(str(k)[:40] for k in unknown)}"
    if ("tool" in item) == ("hook" in item):
        return 'a cleanup names exactly one of "tool" and "hook"'
    kind = ev.CleanupKind.TOOL if "tool" in item else ev.CleanupKind.HOOK
    target = item["tool"] if kind is ev.CleanupKind.TOOL else item["hook"]
    if not isinstance(target, str) or len(target) > 128 or not _NAME.match(target):
        return f"{kind.value.lower()} name {str(target)[:60]!r} is not a plain name"
    arguments = item.get("arguments", {})
    if not isinstance(arguments, dict):
        return "arguments must be an object"
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if len(text.encode()) > MAX_ARGUMENTS_BYTES:
        return f"arguments of {target!r} are over {MAX_ARGUMENTS_BYTES} bytes"
    return CleanupRequest(kind, target, text)
