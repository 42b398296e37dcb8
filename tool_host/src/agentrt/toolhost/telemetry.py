"""Metrics plumbing shared by the runtime and the tool host: a MeterProvider and a /metrics endpoint.

Needs the ``otel`` extra (``opentelemetry-sdk`` and the exporters); importing this module works
without it, and ``build_meter_provider`` then raises ``MetricsUnavailable``.

Which exporters run follows the standard ``OTEL_METRICS_EXPORTER`` (a comma-separated list of
``prometheus``, ``otlp``, ``none``). Unset, the scrape endpoint runs when a listen address is
configured and nothing else. OTLP follows ``OTEL_EXPORTER_OTLP_METRICS_PROTOCOL`` (or
``OTEL_EXPORTER_OTLP_PROTOCOL``): ``grpc`` (default, as the Python SDK's own) or
``http/protobuf``; endpoint, headers and interval come from the other ``OTEL_*`` variables, which
the exporters read themselves.

The endpoint serves ``GET /metrics`` only. On loopback it needs no credentials: it exposes
counts and latencies with bounded attributes (no run ids, no arguments, no secrets), and only
processes on the same machine reach it. Elsewhere a bearer token file is required.
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentrt.toolhost.security import is_loopback_host

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import CollectorRegistry

__all__ = [
    "EXEMPLAR_FILTER_ENV",
    "EXPORTERS",
    "MetricsConfigError",
    "MetricsServer",
    "MetricsSetup",
    "MetricsUnavailable",
    "build_meter_provider",
    "check_listen",
    "chosen_exporters",
    "read_token_file",
]

EXPORTERS = frozenset({"prometheus", "otlp", "none"})


EXEMPLAR_FILTER_ENV = "OTEL_METRICS_EXEMPLAR_FILTER"


class MetricsConfigError(ValueError):
    """The metrics settings cannot be used; the message says which and why (never a token)."""


class MetricsUnavailable(MetricsConfigError):
    """Metrics were asked for but the OpenTelemetry SDK or an exporter is not installed."""


def chosen_exporters(env: Mapping[str, str], *, listen: str) -> frozenset[str]:
    """The exporters to run: ``OTEL_METRICS_EXPORTER``, else ``prometheus`` when ``listen`` is set.

    Raises:
        MetricsConfigError: an unknown exporter name. ``prometheus`` without a listen address is
            dropped: children inherit the variable without an endpoint of their own.
    """
    raw = env.get("OTEL_METRICS_EXPORTER", "").strip()
    if not raw:
        return frozenset({"prometheus"}) if listen else frozenset()
    names = frozenset(part.strip().lower() for part in raw.split(",") if part.strip())
    unknown = sorted(names - EXPORTERS)
    if unknown:
        raise MetricsConfigError(
            f"OTEL_METRICS_EXPORTER: unknown exporter(s) {unknown}; use {sorted(EXPORTERS)}"
        )
    if "none" in names:
        return frozenset()
    if not listen:  # the variable is inherited by child processes that serve no endpoint
        names -= {"prometheus"}
    return names


def read_token_file(path: str) -> str:
    """The bearer token in ``path`` (surrounding whitespace stripped).

    Raises:
        MetricsConfigError: the file cannot be read or is empty (the message names the file only).
    """
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise MetricsConfigError(
            f"cannot read the metrics token file {path}: {exc.__class__.__name__}"
        ) from None
    if not token:
        raise MetricsConfigError(f"the metrics token file {path} is empty")
    return token


def check_listen(listen: str, *, token_file: str) -> tuple[str, int]:
    """Split ``HOST:PORT``; a non-loopback host needs a token file.

    Raises:
        MetricsConfigError: not ``HOST:PORT``, or a non-loopback host without ``token_file``.
    """
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise MetricsConfigError(f"metrics listen {listen!r} is not HOST:PORT")
    bare = host.removeprefix("[").removesuffix("]")
    if not token_file and not is_loopback_host(bare):
        raise MetricsConfigError(
            f"metrics listen {listen!r} is not loopback: set a metrics token file (bearer token) "
            "to serve it there"
        )
    return bare, int(port)


@dataclass(frozen=True, slots=True)
class MetricsSetup:
    """A built MeterProvider and, with the scrape endpoint on, the registry it fills."""

    provider: MeterProvider
    registry: CollectorRegistry | None


def build_meter_provider(
    *, service_name: str, exporters: frozenset[str], env: Mapping[str, str]
) -> MetricsSetup:
    """A MeterProvider with a reader per exporter (none: it records and exports nothing).

    Raises:
        MetricsUnavailable: the SDK or a chosen exporter is not installed.
        MetricsConfigError: an unknown OTLP protocol.
    """
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
    except ImportError:
        raise MetricsUnavailable("metrics need opentelemetry-sdk (install the otel extra)") from None
    readers: list[MetricReader] = []
    registry = None
    if "prometheus" in exporters:
        try:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
            from prometheus_client import CollectorRegistry
        except ImportError:
            raise MetricsUnavailable("the scrape endpoint needs opentelemetry-exporter-prometheus") from None
        # A registry of our own: nothing else the process registers globally leaks into /metrics.
        registry = CollectorRegistry(auto_describe=True)
        readers.append(PrometheusMetricReader(registry=registry))
    if "otlp" in exporters:
        readers.append(PeriodicExportingMetricReader(_otlp_exporter(env)))
    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over our default name (Resource.create).
    resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or service_name})
    provider = MeterProvider(metric_readers=readers, resource=resource, exemplar_filter=_exemplar_filter(env))
    return MetricsSetup(provider=provider, registry=registry)


def _exemplar_filter(env: Mapping[str, str]) -> Any:
    """``OTEL_METRICS_EXEMPLAR_FILTER``, off when unset (the SDK's own default is trace_based).

    With tracing on, a trace-based filter offers every measurement made inside a sampled span to
    an exemplar reservoir: ~15 us each, several per step, for exemplars that the Prometheus
    endpoint drops anyway. OTLP users who want them opt in with the standard variable.

    Raises:
        MetricsConfigError: a value other than always_off, always_on or trace_based.
    """
    from opentelemetry.sdk.metrics import (
        AlwaysOffExemplarFilter,
        AlwaysOnExemplarFilter,
        TraceBasedExemplarFilter,
    )

    choices: dict[str, Callable[[], Any]] = {
        "always_off": AlwaysOffExemplarFilter,
        "always_on": AlwaysOnExemplarFilter,
        "trace_based": TraceBasedExemplarFilter,
    }
    name = (env.get(EXEMPLAR_FILTER_ENV) or "always_off").strip().lower()
    if name not in choices:
        raise MetricsConfigError(
            f"{EXEMPLAR_FILTER_ENV} {name[:40]!r}: use one of {', '.join(sorted(choices))}"
        )
    return choices[name]()


def _otlp_exporter(env: Mapping[str, str]) -> Any:
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc"
    ).strip()
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        elif protocol == "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (  # type: ignore[assignment]
                OTLPMetricExporter,
            )
        else:
            raise MetricsConfigError(
                f"OTEL_EXPORTER_OTLP_PROTOCOL {protocol!r}: use grpc or http/protobuf for metrics"
            )
    except ImportError:
        raise MetricsUnavailable(f"OTLP metrics over {protocol} need opentelemetry-exporter-otlp") from None
    return OTLPMetricExporter()


class MetricsServer:
    """``GET /metrics`` in the Prometheus text format, from one registry, on a daemon thread.

    Args:
        registry: What to serve.
        listen: ``HOST:PORT``; port 0 picks a free one.
        token: When set, requests must carry ``Authorization: Bearer <token>``.
    """

    def __init__(self, *, registry: CollectorRegistry, listen: str, token: str = ""):
        self._host, self._port = check_listen(listen, token_file="set" if token else "")
        self._registry = registry
        self._token = token
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.address = ""

    def start(self) -> str:
        """Bind and serve; returns ``HOST:PORT`` with the real port.

        Raises:
            MetricsConfigError: the address cannot be bound.
        """
        handler = _handler(self._registry, self._token)
        try:
            self._httpd = ThreadingHTTPServer((self._host, self._port), handler)
        except OSError as exc:
            raise MetricsConfigError(
                f"cannot serve metrics on {self._host}:{self._port}: {exc.strerror}"
            ) from None
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="metrics-http", daemon=True)
        self._thread.start()
        host = f"[{self._host}]" if ":" in self._host else self._host
        self.address = f"{host}:{self._httpd.server_address[1]}"
        return self.address

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


def _handler(registry: CollectorRegistry, token: str) -> Callable[..., BaseHTTPRequestHandler]:
    from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

    expected = f"Bearer {token}".encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self._reply(404, b"not found: only /metrics is served\n")
                return
            given = self.headers.get("Authorization", "").encode()
            if token and not hmac.compare_digest(given, expected):
                self._reply(401, b"a bearer token is required\n", auth=True)
                return
            self._reply(200, generate_latest(registry), content_type=CONTENT_TYPE_LATEST)

        def do_POST(self) -> None:
            self._reply(405, b"only GET /metrics\n")

        do_PUT = do_DELETE = do_PATCH = do_POST

        def _reply(
            self, code: int, body: bytes, *, content_type: str = "text/plain", auth: bool = False
        ) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            if auth:
                self.send_header("WWW-Authenticate", 'Bearer realm="metrics"')
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return  # scrapes every few seconds would drown the logs

    return Handler
