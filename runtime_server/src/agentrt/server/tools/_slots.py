"""Per-tool concurrency limits in this runtime process: calls past a tool's limit wait for a slot.

A tool host serves every run of every tenant; a burst of runs calling one slow tool would
otherwise open as many calls at once as there are runs. A limit comes from the operator's
``[tool_limits]`` (per tool, else the default) or, when the config names none for the tool, from
the tool's own ``ToolSpec.max_concurrent_calls``; 0 means no limit. A waiting call spends its own
deadline: when no slot frees up in time it fails TRANSIENT without having been sent. The limit
holds per runtime process; N replicas may send N times as many calls to a shared host.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from agentrt.proto.toolhost.v1 import tool_pb2

__all__ = ["SlotTimeout", "ToolSlots"]


class SlotTimeout(TimeoutError):
    """No slot of the tool became free within the call's deadline."""


class ToolSlots:
    """One semaphore per limited tool.

    Args:
        limits: Tool name -> calls at once (0: no limit), from ``tool_limits.max_concurrent_calls``.
        default: Limit of tools the config does not name and whose spec declares none (0: none).
    """

    def __init__(self, *, limits: Mapping[str, int] | None = None, default: int = 0) -> None:
        self._limits = dict(limits or {})
        bad = sorted(name for name, n in self._limits.items() if n < 0)
        if bad or default < 0:
            raise ValueError(f"tool concurrency limits must be 0 (none) or more: {bad or ['default']}")
        self._default = default
        self._semaphores: dict[str, asyncio.Semaphore] = {}
        self._busy: dict[str, int] = {}

    def limit(self, tool: str, spec: tool_pb2.ToolSpec | None) -> int:
        """The number of calls of ``tool`` that may be in flight at once; 0 means no limit."""
        if tool in self._limits:
            return self._limits[tool]
        declared = spec.max_concurrent_calls if spec is not None else 0
        return declared or self._default

    def busy(self, tool: str) -> int:
        """Calls of ``tool`` holding a slot now."""
        return self._busy.get(tool, 0)

    @asynccontextmanager
    async def hold(self, tool: str, limit: int, timeout_s: float) -> AsyncIterator[float]:
        """Hold one of ``limit`` slots of ``tool``; yields the seconds spent waiting for it.

        Raises:
            SlotTimeout: No slot became free within ``timeout_s``.
        """
        semaphore = self._semaphores.get(tool)
        if semaphore is None:  # a tool's limit never changes: its spec and the config are fixed
            semaphore = self._semaphores[tool] = asyncio.Semaphore(limit)
        started = time.monotonic()
        try:
            async with asyncio.timeout(timeout_s):
                await semaphore.acquire()
        except TimeoutError:
            raise SlotTimeout(
                f"no free slot of tool {tool!r} (at most {limit} calls at once) before the call's deadline"
            ) from None
        self._busy[tool] = self._busy.get(tool, 0) + 1
        try:
            yield time.monotonic() - started
        finally:
            self._busy[tool] -= 1
            semaphore.release()
