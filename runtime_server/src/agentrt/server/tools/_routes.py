"""The router's table of hosts: their channels, their latest listings, and which serves each tool.

Listings arrive at any time (a host's first answer, a re-list when it reconnects, a periodic
one); each is applied through ``core.tool_hosts.plan_routes``, logged when it changes anything
and counted (``tool_host_relist_count``). Calls waiting for a pending tool are woken whenever
the routes change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Sequence

from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.server.core import tool_hosts
from agentrt.server.telemetry import Counters
from agentrt.server.tools._channel import HostChannel
from agentrt.server.tools._watcher import HostWatcher

__all__ = ["ToolRoutes"]

_log = logging.getLogger("agentrt.tools")

Route = tuple[tool_pb2.ToolSpec, HostChannel]


class ToolRoutes:
    """Hosts by name, in the order they were added, and the tools they serve.

    Args:
        counters: Where re-lists are counted.
    """

    def __init__(self, *, counters: Counters) -> None:
        self.counters = counters
        # Tools the configuration names (agents, the inline allow-list): pending while a host
        # has never answered, rather than unknown.
        self.expected: frozenset[str] = frozenset()
        self.conflicts: tuple[tool_hosts.Conflict, ...] = ()
        self._hosts: dict[str, HostChannel] = {}
        self._listings: dict[str, dict[str, tool_pb2.ToolSpec]] = {}  # only hosts that answered
        self._routes: dict[str, str] = {}  # tool -> host name
        self._found: dict[str, Route] = {}
        self._watchers: dict[str, HostWatcher] = {}
        self._changed = asyncio.Event()  # set (and replaced) whenever the routes change
        self._warned_pools: set[str] = set()

    def add(self, host: HostChannel) -> None:
        self._hosts[host.name] = host

    def watch(
        self,
        host: HostChannel,
        *,
        policy: tool_hosts.RelistPolicy,
        list_timeout_s: float,
        listed: bool,
        first_error: str = "",
    ) -> None:
        """Keep the host listed in the background (see :class:`HostWatcher`)."""
        watcher = HostWatcher(
            host=host,
            on_listed=self.learn,
            on_failed=self.failed,
            policy=policy,
            list_timeout_s=list_timeout_s,
            listed=listed,
            first_error=first_error,
        )
        self._watchers[host.name] = watcher
        watcher.start()

    async def remove(self, name: str) -> None:
        """Stop watching a host, route nothing more to it, and close its channel."""
        watcher = self._watchers.pop(name, None)
        if watcher is not None:
            await watcher.stop()
        host = self._hosts.pop(name, None)
        self._listings.pop(name, None)
        self._warned_pools.discard(name)
        self._reroute()
        if host is not None:
            await host.close()

    def find(self, tool: str) -> Route | None:
        return self._found.get(tool)

    async def wait_for(self, tool: str, wait_s: float) -> Route | None:
        """The route of ``tool``; a pending one is waited for up to ``wait_s``."""
        found = self._found.get(tool)
        if found is not None or tool not in self.pending_tools():
            return found
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_s):
                while tool in self.pending_tools():
                    await self._changed.wait()
        return self._found.get(tool)

    def host_names(self) -> list[str]:
        return list(self._hosts)

    def unlisted_hosts(self) -> list[str]:
        """Hosts that never answered ListTools: what they serve is not known yet."""
        return [name for name in self._hosts if name not in self._listings]

    def pending_tools(self) -> frozenset[str]:
        """Tools the configuration names that no host serves, while a host has never answered."""
        if not self.unlisted_hosts():
            return frozenset()
        return self.expected - self._routes.keys()

    def tool_names(self) -> list[str]:
        return sorted(self._found.keys() | self.pending_tools())

    def failed(self, name: str) -> None:
        self.counters.inc("tool_host_relist_count", host=name, outcome="failed")

    def learn(self, name: str, specs: Sequence[tool_pb2.ToolSpec], why: str) -> None:
        """A host listed its tools (``why``: first, reconnected, periodic, retry): route by them.

        A listing from a host removed meanwhile is ignored.
        """
        if name not in self._hosts:
            return
        before = self._listings.get(name)
        listing = {spec.name: spec for spec in specs}
        self._listings[name] = listing
        if before is not None:
            changed = before != listing
            if changed or why == "reconnected":  # unchanged periodic re-lists are not counted
                outcome = "changed" if changed else "unchanged"
                self.counters.inc("tool_host_relist_count", host=name, outcome=outcome)
            if changed:
                versions = sorted(
                    t for t, s in listing.items() if t in before and before[t].version != s.version
                )
                _log.info(
                    "tool host %r listed its tools again (%s): %d tools; new %s, gone %s, new versions %s",
                    name,
                    why,
                    len(listing),
                    sorted(listing.keys() - before.keys()),
                    sorted(before.keys() - listing.keys()),
                    versions,
                )
        elif why != "first":
            _log.info("tool host %r answers: it serves %s", name, sorted(listing))
        self._warn_pooled_writes(name, listing.values())
        self._reroute()

    def _warn_pooled_writes(self, name: str, specs: Iterable[tool_pb2.ToolSpec]) -> None:
        writes = sorted(
            s.name for s in specs if s.side_effect != tool_pb2.SIDE_EFFECT_READ_ONLY and not s.idempotent
        )
        if self._hosts[name].pooled and writes and name not in self._warned_pools:
            self._warned_pools.add(name)
            _log.warning(
                "tool host pool %r serves write tools %s: its members must share one ledger, or a "
                "write in doubt looked up on another member reads as never run and is sent again",
                name,
                writes,
            )

    def _reroute(self) -> None:
        listings = {name: list(self._listings[name]) for name in self._hosts if name in self._listings}
        plan = tool_hosts.plan_routes(self._routes, listings)
        for conflict in plan.conflicts:
            if conflict not in self.conflicts:
                _log.error(
                    "tool %r is listed by tool hosts %r and %r: calls go to %r only",
                    conflict.tool,
                    conflict.kept,
                    conflict.refused,
                    conflict.kept,
                )
        if plan.removed:
            _log.warning(
                "no tool host serves %s any more: calls to them fail UNKNOWN_TOOL", list(plan.removed)
            )
        self.conflicts = plan.conflicts
        self._routes = dict(plan.routes)
        self._found = {
            tool: (self._listings[host][tool], self._hosts[host]) for tool, host in self._routes.items()
        }
        self._changed.set()
        self._changed = asyncio.Event()

    async def close(self) -> None:
        for watcher in self._watchers.values():
            await watcher.stop()
        self._watchers.clear()
        for host in self._hosts.values():
            await host.close()
        self._hosts.clear()
        self._listings.clear()
        self._routes.clear()
        self._found.clear()
