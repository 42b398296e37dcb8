"""A bounded LRU of model providers that closes evicted ones, never under a call in flight (§11.8).

Each provider may hold an HTTP client with its own connection pool (file descriptors, buffers).
Callers with many distinct options (inline agents) would otherwise keep one alive per options
forever. Past ``max_providers`` the least recently used provider leaves the cache; it is closed at
once when no call holds it, or when the last :class:`ProviderLease` on it is released. At most
``max_providers`` providers are cached, plus evicted ones still serving calls in flight.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from ._types import ModelProvider

__all__ = ["CacheEntry", "CacheStats", "ProviderCache", "ProviderLease"]

logger = logging.getLogger(__name__)

Key = tuple[str, str, str]


@dataclass(eq=False, slots=True)
class CacheEntry:
    """One cached provider, with the number of calls holding it."""

    key: Key
    provider: ModelProvider
    users: int = 0
    evicted: bool = False
    identities: list[Any] = field(default_factory=list)  # shortcut keys pointing here


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheStats:
    """What the cache holds.

    Attributes:
        cached: Providers in the cache (at most ``max_providers``).
        in_use: Providers (cached or evicted) with calls in flight.
        retiring: Evicted providers not closed yet (in use, or closing).
        created: Providers created since the start.
        closed: Providers closed since the start.
    """

    cached: int
    in_use: int
    retiring: int
    created: int
    closed: int


class ProviderLease:
    """One caller's hold on a provider: it is not closed before :meth:`release` (idempotent)."""

    __slots__ = ("_cache", "_entry", "provider")

    def __init__(self, cache: ProviderCache, entry: CacheEntry) -> None:
        self._cache: ProviderCache | None = cache
        self._entry = entry
        self.provider = entry.provider

    def release(self) -> None:
        cache, self._cache = self._cache, None
        if cache is not None:
            cache._release(self._entry)

    def __enter__(self) -> ModelProvider:
        return self.provider

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


class ProviderCache:
    """The LRU itself; :class:`~agentrt.server.models.ModelRegistry` creates what goes in.

    Args:
        max_providers: Providers kept; the least recently used one past it is evicted.
        on_evict: Called with each evicted entry (the owner drops its shortcuts to it).
    """

    def __init__(
        self, *, max_providers: int, on_evict: Callable[[CacheEntry], None] = lambda entry: None
    ) -> None:
        if max_providers < 1:
            raise ValueError("max_providers must be at least 1")
        self.max_providers = max_providers
        self._on_evict = on_evict
        self._entries: OrderedDict[Key, CacheEntry] = OrderedDict()
        self._retiring: set[CacheEntry] = set()  # evicted, not closed yet
        self._closing: set[asyncio.Task[None]] = set()
        self._unclosed: list[ModelProvider] = []  # evicted without a running loop; closed in aclose
        self._created = 0
        self._closed = 0
        self._shut = False  # aclose ran: a lease released later closes nothing again

    def get(self, key: Key) -> CacheEntry | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, key: Key, provider: ModelProvider) -> CacheEntry:
        """Cache a new provider as the most recently used one; evict past the bound.

        Returns:
            The new entry; evicted entries lose their shortcut keys (see :meth:`evicted_identities`).
        """
        entry = CacheEntry(key, provider)
        self._entries[key] = entry
        self._created += 1
        while len(self._entries) > self.max_providers:
            _, old = self._entries.popitem(last=False)
            self._retire(old)
        return entry

    def lease(self, entry: CacheEntry) -> ProviderLease:
        entry.users += 1
        return ProviderLease(self, entry)

    def stats(self) -> CacheStats:
        in_use = sum(1 for e in self._entries.values() if e.users) + sum(1 for e in self._retiring if e.users)
        return CacheStats(
            cached=len(self._entries),
            in_use=in_use,
            retiring=len(self._retiring),
            created=self._created,
            closed=self._closed,
        )

    def _retire(self, entry: CacheEntry) -> None:
        entry.evicted = True
        self._retiring.add(entry)
        self._on_evict(entry)
        if entry.users == 0:
            self._close_soon(entry)

    def _release(self, entry: CacheEntry) -> None:
        entry.users -= 1
        if entry.evicted and entry.users == 0 and not self._shut:
            self._close_soon(entry)

    def _close_soon(self, entry: CacheEntry) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._retiring.discard(entry)
            self._unclosed.append(entry.provider)
            return
        task = loop.create_task(self._close(entry))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _close(self, entry: CacheEntry) -> None:
        try:
            await entry.provider.aclose()
        except Exception:
            # Nobody waits for this close; the provider is gone from the cache either way.
            logger.warning("closing evicted model provider %r failed", entry.provider, exc_info=True)
        finally:
            self._closed += 1
            self._retiring.discard(entry)

    async def drain(self) -> None:
        """Wait until every evicted provider that no call holds is closed."""
        while self._closing:
            await asyncio.gather(*list(self._closing), return_exceptions=True)

    async def aclose(self) -> None:
        """Close every provider, cached, evicted or held; raise the first failure afterwards."""
        self._shut = True
        await self.drain()
        providers = [e.provider for e in self._entries.values()]
        providers += [e.provider for e in self._retiring] + self._unclosed
        self._entries.clear()
        self._retiring.clear()
        self._unclosed = []
        first: BaseException | None = None
        for provider in providers:
            try:
                await provider.aclose()
            except Exception as exc:
                logger.warning("closing model provider %r failed", provider, exc_info=True)
                first = first or exc
            self._closed += 1
        if first is not None:
            raise first
