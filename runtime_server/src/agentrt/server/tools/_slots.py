"""Per-tool concurrency limits in this runtime process: calls past a tool's limit wait for a slot.

A tool host serves every run of every tenant; a burst of runs calling one slow tool would
otherwise open as many calls at once as there are runs. A limit comes from the operator's
``[tool_limits]`` (per tool, else the default) or, when the config names none for the tool, from
the tool's own ``ToolSpec.max_concurrent_calls``; 0 means no limit. A waiting call spends its own
deadline: when no slot frees up in time it fails TRANSIENT without having been sent. The limit
holds per runtime process; N replicas may send N times as many calls to a shared host.

Under a tool's limit, ``[tool_limits] max_concurrent_calls_per_tenant`` (else
``default_max_concurrent_calls_per_tenant``; 0, the default, means no cap) caps the calls of one
tenant to that tool, so one tenant's burst cannot take every slot. Such a call takes its tenant's
slot first, then the tool's: a tenant at its cap waits outside the tool's queue and holds no tool
slot meanwhile, and since every call takes the two in that order no two calls can wait on each
other. The per-tenant semaphores are forgotten as soon as no call holds or waits for one, so
memory follows the calls in flight, not the number of tenants ever seen. Cost: nothing beyond a
second semaphore; no I/O.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass

from agentrt.proto.toolhost.v1 import tool_pb2

__all__ = ["SlotTimeout", "ToolSlots"]


class SlotTimeout(TimeoutError):
    """No slot of the tool (or of the tool for this tenant) became free within the call's deadline.

    Attributes:
        tool: The tool called.
        limit: The limit that was full.
        per_tenant: True when the full one was the tenant's cap, not the tool's limit.
    """

    def __init__(self, message: str, *, tool: str, limit: int, per_tenant: bool) -> None:
        super().__init__(message)
        self.tool = tool
        self.limit = limit
        self.per_tenant = per_tenant


@dataclass(slots=True)
class _TenantSlots:
    semaphore: asyncio.Semaphore
    users: int = 0  # calls holding or waiting for a slot; the entry goes when this is 0
    busy: int = 0


class ToolSlots:
    """One semaphore per limited tool, and one per (tool, tenant) with calls in flight.

    Args:
        limits: Tool name -> calls at once (0: no limit), from ``tool_limits.max_concurrent_calls``.
        default: Limit of tools the config does not name and whose spec declares none (0: none).
        per_tenant: Tool name -> calls of one tenant at once (0: no cap), from
            ``tool_limits.max_concurrent_calls_per_tenant``.
        default_per_tenant: Per-tenant cap of tools ``per_tenant`` does not name (0: none).

    Raises:
        ValueError: A limit or cap is negative.
    """

    def __init__(
        self,
        *,
        limits: Mapping[str, int] | None = None,
        default: int = 0,
        per_tenant: Mapping[str, int] | None = None,
        default_per_tenant: int = 0,
    ) -> None:
        self._limits = dict(limits or {})
        self._per_tenant = dict(per_tenant or {})
        bad = sorted(name for name, n in (*self._limits.items(), *self._per_tenant.items()) if n < 0)
        defaults = {"default": default, "default_per_tenant": default_per_tenant}
        bad += [name for name, n in defaults.items() if n < 0]
        if bad:
            raise ValueError(f"tool concurrency limits must be 0 (none) or more: {bad}")
        self._default = default
        self._default_per_tenant = default_per_tenant
        self._semaphores: dict[str, asyncio.Semaphore] = {}
        self._busy: dict[str, int] = {}
        self._tenants: dict[tuple[str, str], _TenantSlots] = {}

    def limit(self, tool: str, spec: tool_pb2.ToolSpec | None) -> int:
        """The number of calls of ``tool`` that may be in flight at once; 0 means no limit."""
        if tool in self._limits:
            return self._limits[tool]
        declared = spec.max_concurrent_calls if spec is not None else 0
        return declared or self._default

    def tenant_limit(self, tool: str) -> int:
        """The number of calls of ``tool`` one tenant may have in flight at once; 0 means no cap."""
        return self._per_tenant.get(tool, self._default_per_tenant)

    def busy(self, tool: str) -> int:
        """Calls of ``tool`` holding a slot now."""
        return self._busy.get(tool, 0)

    def tenant_busy(self, tool: str, tenant: str) -> int:
        """Calls of ``tool`` by ``tenant`` holding a per-tenant slot now."""
        entry = self._tenants.get((tool, tenant))
        return entry.busy if entry is not None else 0

    def tenants_tracked(self) -> int:
        """(tool, tenant) pairs with a semaphore now: those with calls holding or waiting."""
        return len(self._tenants)

    @asynccontextmanager
    async def hold(
        self, tool: str, limit: int, timeout_s: float, *, tenant: str = "", tenant_limit: int = 0
    ) -> AsyncIterator[float]:
        """Hold a slot of ``tenant`` for ``tool`` (if capped), then one of ``limit`` slots of ``tool``.

        Yields the seconds spent waiting for both. ``limit`` or ``tenant_limit`` 0: that one is not
        limited. Both are given back when the block ends, however it ends.

        Raises:
            SlotTimeout: No slot became free within ``timeout_s`` (both waits share it).
        """
        started = time.monotonic()
        deadline = started + timeout_s
        # The tenant's slot first, always (see the module docstring).
        async with (
            self._tenant_slot(tool, tenant, tenant_limit, deadline),
            self._tool_slot(tool, limit, deadline),
        ):
            yield time.monotonic() - started

    @asynccontextmanager
    async def _tool_slot(self, tool: str, limit: int, deadline: float) -> AsyncIterator[None]:
        if not limit:
            yield
            return
        semaphore = self._semaphores.get(tool)
        if semaphore is None:  # a tool's limit never changes: its spec and the config are fixed
            semaphore = self._semaphores[tool] = asyncio.Semaphore(limit)
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                await semaphore.acquire()
        except TimeoutError:
            raise SlotTimeout(
                f"no free slot of tool {tool!r} (at most {limit} calls at once) before the call's deadline",
                tool=tool,
                limit=limit,
                per_tenant=False,
            ) from None
        self._busy[tool] = self._busy.get(tool, 0) + 1
        try:
            yield
        finally:
            self._busy[tool] -= 1
            semaphore.release()

    @asynccontextmanager
    async def _tenant_slot(self, tool: str, tenant: str, limit: int, deadline: float) -> AsyncIterator[None]:
        if not limit:
            yield
            return
        key = (tool, tenant)
        entry = self._tenants.get(key)
        if entry is None:
            entry = self._tenants[key] = _TenantSlots(asyncio.Semaphore(limit))
        entry.users += 1
        try:
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    await entry.semaphore.acquire()
            except TimeoutError:
                raise SlotTimeout(
                    f"no free slot of tool {tool!r} for this tenant (at most {limit} calls of one "
                    "tenant at once) before the call's deadline",
                    tool=tool,
                    limit=limit,
                    per_tenant=True,
                ) from None
            entry.busy += 1
            try:
                yield
            finally:
                entry.busy -= 1
                entry.semaphore.release()
        finally:
            entry.users -= 1
            if not entry.users:  # nobody holds or waits: a fresh semaphore later is the same
                del self._tenants[key]
