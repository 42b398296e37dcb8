"""Which tool host serves which tool, as hosts come, go and list their tools again (pure).

The router learns each host's tools from its ListTools answers, at any time: at start, when the
host (re)appears, on a periodic re-list. ``plan_routes`` turns the listings into one routing
table: a tool stays with the host that serves it now while that host still lists it (a call in
flight is never moved under a run's feet by another host appearing); a newly listed tool goes
to the first host, in listing order, that lists it; another host listing it too is a conflict,
refused and reported. ``relist_delay_s`` spaces the ListTools of a host that does not answer.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from agentrt.server.core._deadline import backoff_delay_s
from agentrt.server.core._events import ToolError, ToolErrorCode

__all__ = [
    "Conflict",
    "RelistPolicy",
    "RoutePlan",
    "pending_call_wait_s",
    "pending_tool_error",
    "plan_routes",
    "relist_delay_s",
]


@dataclass(frozen=True, slots=True)
class Conflict:
    """A tool two hosts list: ``kept`` serves it, ``refused`` is never sent it."""

    tool: str
    kept: str
    refused: str


@dataclass(frozen=True, slots=True)
class RoutePlan:
    """The routing table after a change of listings, and what changed."""

    routes: Mapping[str, str]  # tool name -> the name of the host that serves it
    added: tuple[str, ...]  # tools routed now that were not before
    removed: tuple[str, ...]  # tools no host serves any more
    moved: tuple[str, ...]  # tools now served by another host than before
    conflicts: tuple[Conflict, ...]


def plan_routes(current: Mapping[str, str], listings: Mapping[str, Collection[str]]) -> RoutePlan:
    """The routes once the hosts list ``listings`` (host -> its tool names, in config order).

    Args:
        current: The routes now (tool -> host).
        listings: Each listed host's tools; a host not in it serves nothing (never listed, or gone).
    """
    routes = {tool: host for tool, host in current.items() if tool in listings.get(host, ())}
    conflicts: list[Conflict] = []
    for host, tools in listings.items():
        for tool in sorted(tools):
            kept = routes.setdefault(tool, host)
            if kept != host:
                conflicts.append(Conflict(tool=tool, kept=kept, refused=host))
    added = tuple(sorted(t for t in routes if t not in current))
    removed = tuple(sorted(t for t in current if t not in routes))
    moved = tuple(sorted(t for t, h in routes.items() if t in current and current[t] != h))
    return RoutePlan(routes=routes, added=added, removed=removed, moved=moved, conflicts=tuple(conflicts))


@dataclass(frozen=True, slots=True, kw_only=True)
class RelistPolicy:
    """How a host's tools are listed again: every ``every_s`` while it answers; after a failed
    ListTools, again after a backoff from ``base_s`` doubling up to ``cap_s`` (with full jitter),
    or as soon as its channel connects, whichever comes first."""

    every_s: float = 30.0
    base_s: float = 0.2
    cap_s: float = 5.0


def relist_delay_s(*, failures: int, policy: RelistPolicy, rand: float) -> float:
    """How long to wait for a host before the next ListTools, after ``failures`` failed in a row.

    Never less than a tenth of ``base_s``: a host that refuses at once is not asked in a hot loop.
    """
    if failures <= 0:
        return policy.every_s
    drawn = backoff_delay_s(attempt=failures, base_s=policy.base_s, cap_s=policy.cap_s, rand=rand)
    return max(policy.base_s / 10, drawn)


def pending_call_wait_s(
    *, connect_s: float, attempts: int, now_s: float, run_deadline_s: float, reserve_s: float
) -> float:
    """How long a call of a pending tool waits for its host before it may start: the connect
    layer's time for each attempt the retry policy allows, within the run's deadline less its
    reserve (0 when none is left)."""
    return max(0.0, min(connect_s * attempts, run_deadline_s - now_s - reserve_s))


def pending_tool_error(tool: str, waited_s: float) -> ToolError:
    """Why a call of a tool still pending after its wait ends unstarted: transient, the model may
    ask again later."""
    return ToolError(
        ToolErrorCode.TRANSIENT,
        f"{tool} is not served yet: its tool host has not answered within {waited_s:g}s; not sent",
    )
