"""The runtime's MeterProvider: the engine's counters, observable gauges, /metrics and OTLP export.

What runs follows ``[metrics]`` and the standard ``OTEL_METRICS_EXPORTER`` (see
``agentrt.toolhost.telemetry``): with ``[metrics] listen`` set the scrape endpoint serves
``/metrics``; with ``otlp`` named, metrics are pushed on ``OTEL_METRIC_EXPORT_INTERVAL``.

Gauges that need the database (active runs by phase, queue depth, runs needing attention) are
read by one query batch every ``[metrics] gauge_refresh_s`` and cached: a scrape reads the
cache, never the database. Owned leases and follow streams are read from memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentrt.server.config import ConfigError, MetricsConfig
from agentrt.server.telemetry._counters import Counters
from agentrt.toolhost.telemetry import (
    MetricsConfigError,
    MetricsServer,
    build_meter_provider,
    chosen_exporters,
    read_token_file,
)

__all__ = ["GAUGES", "GaugeCounts", "RuntimeMetrics"]

log = logging.getLogger("agentrt.server.metrics")

#: Observable gauges (OTel names); Prometheus drops nothing but turns dots into underscores.
GAUGES: Mapping[str, str] = {
    "agentrt.runs.active": "Active runs by phase (cached, refreshed every gauge_refresh_s)",
    "agentrt.queue.depth": "Runs waiting for a worker (cached)",
    "agentrt.runs.needing_attention": "Runs whose wait was escalated to a person (cached)",
    "agentrt.leases.owned": "Runs this process holds the lease of",
    "agentrt.streams.followers": "Open event streams following a run live",
    "agentrt.redis.up": "1 while the Redis fan-out is up, 0 while on store polling (absent without [redis])",
}


@dataclass(frozen=True, slots=True)
class GaugeCounts:
    """One reading of the database gauges."""

    by_phase: Mapping[str, int] = field(default_factory=dict)
    queue_depth: int = 0
    needing_attention: int = 0


class RuntimeMetrics:
    """Owns the provider, the endpoint and the gauge refresher of one runtime process.

    Raises:
        ConfigError: (from ``build``) bad exporter settings, an unreadable token file, the otel
            packages missing, or an address that cannot be bound (``start``).
    """

    def __init__(self, *, config: MetricsConfig, provider: Any, registry: Any, token: str) -> None:
        self.config = config
        self._provider = provider
        self._registry = registry
        self._token = token
        meter = provider.get_meter("agentrt.server") if provider is not None else None
        self.counters = Counters(meter, max_tenants=config.max_tenants, max_tools=config.max_tools)
        self.server: MetricsServer | None = None
        self._counts = GaugeCounts()
        self._live: Callable[[], tuple[int, int]] = lambda: (0, 0)
        self.redis_up: Callable[[], bool | None] = lambda: None  # set when [redis] is on
        self._refresher: asyncio.Task[None] | None = None
        if meter is not None:
            self._gauges(meter)

    @classmethod
    def build(cls, config: MetricsConfig, *, env: Mapping[str, str] | None = None) -> RuntimeMetrics:
        env = os.environ if env is None else env
        try:
            token = read_token_file(config.token_file) if config.token_file else ""
            exporters = chosen_exporters(env, listen=config.listen)
            if not exporters:
                return cls(config=config, provider=None, registry=None, token=token)
            setup = build_meter_provider(service_name="agentrt-runtime", exporters=exporters, env=env)
        except MetricsConfigError as exc:
            raise ConfigError(str(exc)) from None
        return cls(config=config, provider=setup.provider, registry=setup.registry, token=token)

    def start_endpoint(self) -> str:
        """Serve /metrics when configured; its ``HOST:PORT``, or "" when none is served.

        Raises:
            ConfigError: the address cannot be bound.
        """
        if self._registry is None:
            return ""
        self.server = MetricsServer(registry=self._registry, listen=self.config.listen, token=self._token)
        try:
            return self.server.start()
        except MetricsConfigError as exc:
            self.server = None
            raise ConfigError(str(exc)) from None

    def watch(
        self, *, read_counts: Callable[[], Awaitable[GaugeCounts]], live: Callable[[], tuple[int, int]]
    ) -> None:
        """Refresh the database gauges in the background; ``live`` gives (owned leases, followers)."""
        self._live = live
        if self._provider is not None and self._refresher is None:
            self._refresher = asyncio.get_running_loop().create_task(self._refresh(read_counts))

    async def _refresh(self, read_counts: Callable[[], Awaitable[GaugeCounts]]) -> None:
        while True:
            try:
                self._counts = await read_counts()
            except Exception:  # a blip keeps the last reading; the next pass tries again
                log.warning("reading the gauge counts failed", exc_info=True)
            await asyncio.sleep(self.config.gauge_refresh_s)

    async def stop(self) -> None:
        """Stop refreshing and serving; flush OTLP (a last export) before the process exits."""
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
            self._refresher = None
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self._provider is not None:
            provider, self._provider = self._provider, None
            await asyncio.to_thread(provider.shutdown)

    def _redis_up(self, _: Any) -> Iterable[Any]:
        from opentelemetry.metrics import Observation

        up = self.redis_up()
        return [] if up is None else [Observation(int(up))]

    def _gauges(self, meter: Any) -> None:
        from opentelemetry.metrics import CallbackOptions, Observation

        def phases(_: CallbackOptions) -> Iterable[Observation]:
            return [Observation(n, {"phase": phase}) for phase, n in sorted(self._counts.by_phase.items())]

        def one(read: Callable[[], int]) -> Callable[[CallbackOptions], Iterable[Observation]]:
            return lambda _: [Observation(read())]

        readers: dict[str, Callable[[CallbackOptions], Iterable[Observation]]] = {
            "agentrt.runs.active": phases,
            "agentrt.queue.depth": one(lambda: self._counts.queue_depth),
            "agentrt.runs.needing_attention": one(lambda: self._counts.needing_attention),
            "agentrt.leases.owned": one(lambda: self._live()[0]),
            "agentrt.streams.followers": one(lambda: self._live()[1]),
            "agentrt.redis.up": self._redis_up,
        }
        for name, description in GAUGES.items():
            meter.create_observable_gauge(name, callbacks=[readers[name]], unit="1", description=description)
