"""The tool host's metrics: its call counters as one OTel counter, served and exported per ``telemetry``."""

from __future__ import annotations

import collections
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agentrt.toolhost.telemetry import (
    MetricsServer,
    build_meter_provider,
    check_listen,
    chosen_exporters,
    read_token_file,
)

__all__ = ["HOST_EVENTS_METRIC", "HostMetrics", "start_host_metrics"]

#: One counter, ``event`` being the host's own counter names (a fixed set: invocations,
#: duplicate_suppressed, timeout, failed_<code>...), never a run, call or tenant id.
HOST_EVENTS_METRIC = "agentrt.toolhost.events"


@dataclass
class HostMetrics:
    provider: Any
    server: MetricsServer | None

    def stop(self) -> None:
        """Flush (OTLP) and stop serving; the last export happens here, before exit."""
        if self.server is not None:
            self.server.stop()
        self.provider.shutdown()


def start_host_metrics(
    counters: collections.Counter[str],
    *,
    listen: str,
    token_file: str,
    env: Mapping[str, str] | None = None,
) -> HostMetrics | None:
    """Serve and/or export ``counters``; None when no exporter is chosen.

    Raises:
        MetricsConfigError: bad listen address, a non-loopback one without a token file, an
            unreadable token file, an unknown exporter, or the otel extra missing.
    """
    env = os.environ if env is None else env
    if listen:
        check_listen(listen, token_file=token_file)
    token = read_token_file(token_file) if token_file else ""
    exporters = chosen_exporters(env, listen=listen)
    if not exporters:
        return None
    setup = build_meter_provider(service_name="agentrt-toolhost", exporters=exporters, env=env)
    from opentelemetry.metrics import CallbackOptions, Observation

    def observe(_: CallbackOptions) -> Iterable[Observation]:
        seen = {"invocations": 0, **counters}  # the series exists from the first scrape on
        return [Observation(value, {"event": name}) for name, value in sorted(seen.items())]

    meter = setup.provider.get_meter("agentrt.toolhost")
    meter.create_observable_counter(
        HOST_EVENTS_METRIC, callbacks=[observe], unit="1", description="Tool host call events by kind"
    )
    server = None
    if setup.registry is not None:
        server = MetricsServer(registry=setup.registry, listen=listen, token=token)
        server.start()
    return HostMetrics(provider=setup.provider, server=server)
