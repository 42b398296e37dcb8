"""Plugin manager factory and the registry that creates and caches model providers."""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Iterable, Mapping
from types import MappingProxyType, TracebackType
from typing import Any

import pluggy

from . import hookspecs
from ._cache import CacheEntry, CacheStats, ProviderCache, ProviderLease
from ._errors import ModelConfigError
from ._http import DEFAULT_CONNECT_S
from ._types import ModelProvider, ModelSpecData

__all__ = [
    "DEFAULT_MAX_PROVIDERS",
    "DEFAULT_MODEL_PLUGINS",
    "ENTRYPOINT_GROUP",
    "ModelRegistry",
    "get_model_plugin_manager",
]

logger = logging.getLogger(__name__)

#: Entry-point group of model provider plugins (tool and policy plugins have their own).
ENTRYPOINT_GROUP = hookspecs.PROJECT_NAME

#: Built-in providers, registered as plugins (as datasette does with its default plugins).
DEFAULT_MODEL_PLUGINS: tuple[str, ...] = (
    "agentrt.server.models._scripted",
    "agentrt.server.models._openai",
    "agentrt.server.models._anthropic",
)

# Bound of the by-identity lookup cache; past it the cache starts over (it is only a shortcut).
_IDENTITY_CACHE_SIZE = 1024
#: Providers kept when the registry is given no bound (``model_cache.max_providers``).
DEFAULT_MAX_PROVIDERS = 64


def get_model_plugin_manager(
    *, entrypoints: bool = True, blocked: Iterable[str] = ()
) -> pluggy.PluginManager:
    """Build a plugin manager with the model hookspecs and the built-in providers.

    Args:
        entrypoints: Also load the plugins of the ``agentrt.models`` entry-point group. A plugin
            that fails to import makes this raise (fail fast); block it with ``blocked``.
        blocked: Plugin names (entry-point names or built-in module names) not to register.

    Returns:
        A new plugin manager; each call returns a fresh one.

    Raises:
        pluggy.PluginValidationError: A plugin implements a model hook that does not exist
            (a misspelled name) or with arguments the hookspec does not have.
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    for name in blocked:
        pm.set_blocked(name)
    for name in DEFAULT_MODEL_PLUGINS:
        if not pm.is_blocked(name):
            pm.register(importlib.import_module(name), name=name)
    if entrypoints:
        pm.load_setuptools_entrypoints(ENTRYPOINT_GROUP)
    # The family has its own project name, so every unknown hook here is a misspelled model hook.
    pm.check_pending()
    return pm


def _json_default(value: object) -> object:
    # Options may arrive as read-only mappings (e.g. MappingProxyType), which json does not know.
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not a JSON value")


class ModelRegistry:
    """Creates model providers through the plugin hook and keeps them in a bounded LRU.

    One provider is kept per (provider, model name, options); providers are shared by all runs and
    steps that use the same spec. At most ``max_providers`` are kept: the least recently used one
    past it is closed (its HTTP client with it) as soon as no call holds it through a
    :meth:`lease`. Options are treated as immutable once passed in: the same options object is
    recognised by identity, without serialising it again. Close the registry with :meth:`aclose`
    (or ``async with``).

    Args:
        pm: Plugin manager from :func:`get_model_plugin_manager`.
        max_providers: Providers kept open at most, besides evicted ones serving calls in flight.
        connect_s: Seconds a model call may wait for a connection (``[timeouts] connect_s``),
            passed to every provider the registry creates.
    """

    def __init__(
        self,
        pm: pluggy.PluginManager,
        *,
        max_providers: int = DEFAULT_MAX_PROVIDERS,
        connect_s: float = DEFAULT_CONNECT_S,
    ) -> None:
        self._pm = pm
        self._connect_s = connect_s
        self._cache = ProviderCache(max_providers=max_providers, on_evict=self._forget)
        # The engine passes the same options object on every step of an agent; serialising a long
        # script each time would dominate the scripted benchmark. The entry keeps the options alive,
        # so their id cannot be reused while cached.
        self._by_identity: dict[tuple[str, str, int], tuple[Mapping[str, Any], CacheEntry]] = {}
        self._closed = False

    def provider(self, spec: ModelSpecData) -> ModelProvider:
        """Return the provider for ``spec``, creating it on first use (to check a spec, say).

        A provider returned here may be closed once it is evicted: to call it, hold a
        :meth:`lease` for the duration of the call.

        Args:
            spec: Provider name, model name and options.

        Returns:
            The cached or newly created provider.

        Raises:
            ModelConfigError: Unknown provider (the message names the known ones), options that are
                not JSON, or options the provider rejects.
            RuntimeError: The registry is closed.
        """
        return self._entry(spec).provider

    def lease(self, spec: ModelSpecData) -> ProviderLease:
        """Hold the provider for ``spec`` for a call: it is not closed before the lease is released.

        Use it as a context manager: ``with registry.lease(spec) as provider: await provider.complete(...)``.

        Raises:
            ModelConfigError: As :meth:`provider`.
            RuntimeError: The registry is closed.
        """
        return self._cache.lease(self._entry(spec))

    def stats(self) -> CacheStats:
        """How many providers are cached, in use, evicted but open, created and closed so far."""
        return self._cache.stats()

    async def drain(self) -> None:
        """Wait until evicted providers that no call holds are closed (closing runs in the background)."""
        await self._cache.drain()

    def _entry(self, spec: ModelSpecData) -> CacheEntry:
        if self._closed:
            raise RuntimeError("ModelRegistry is closed")
        identity = (spec.provider, spec.name, id(spec.options))
        hit = self._by_identity.get(identity)
        if hit is not None and hit[0] is spec.options and not hit[1].evicted:
            entry = self._cache.get(hit[1].key)
            if entry is hit[1]:
                return entry
        entry = self._create(spec)
        if len(self._by_identity) >= _IDENTITY_CACHE_SIZE:
            for _, cached in self._by_identity.values():
                cached.identities.clear()
            self._by_identity.clear()
        self._by_identity[identity] = (spec.options, entry)
        entry.identities.append(identity)
        return entry

    def _forget(self, entry: CacheEntry) -> None:
        # An evicted provider must not stay reachable (nor alive) through the identity shortcut.
        for identity in entry.identities:
            hit = self._by_identity.get(identity)
            if hit is not None and hit[1] is entry:
                del self._by_identity[identity]
        entry.identities.clear()

    def _create(self, spec: ModelSpecData) -> CacheEntry:
        try:
            options_json = json.dumps(
                spec.options, sort_keys=True, separators=(",", ":"), allow_nan=False, default=_json_default
            )
        except (TypeError, ValueError) as exc:
            raise ModelConfigError(
                f"options of model provider {spec.provider!r} must be JSON values: {exc}",
                reason="bad_options",
            ) from None
        key = (spec.provider, spec.name, options_json)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        # A private, read-only copy: a plugin cannot alter the caller's spec or the cache key.
        options: MappingProxyType[str, Any] = MappingProxyType(json.loads(options_json))
        created = self._pm.hook.agentrt_model_provider(
            name=spec.provider, options=options, connect_s=self._connect_s
        )
        if created is None:
            known = ", ".join(self.known_providers()) or "none"
            raise ModelConfigError(
                f"unknown model provider {spec.provider!r}; known providers: {known}",
                reason="unknown_provider",
            )
        if not isinstance(created, ModelProvider):
            raise TypeError(
                f"agentrt_model_provider for {spec.provider!r} returned {type(created).__name__}, "
                "not a ModelProvider"
            )
        logger.debug("created model provider %s for model %s", spec.provider, spec.name)
        return self._cache.put(key, created)

    def known_providers(self) -> list[str]:
        """Return the sorted provider names that plugins declare through ``agentrt_model_provider_names``."""
        names: set[str] = set()
        for result in self._pm.hook.agentrt_model_provider_names():
            names.update(result)
        return sorted(names)

    async def aclose(self) -> None:
        """Close every provider created so far; the registry cannot be used afterwards.

        Every provider is closed even when some fail; the first failure is raised afterwards.
        """
        self._closed = True
        self._by_identity.clear()
        await self._cache.aclose()

    async def __aenter__(self) -> ModelRegistry:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
