"""The metrics plumbing: bounded attributes, exporter choice, the /metrics endpoint and its token,
OTLP export to a receiver speaking the real protocol, and every bad setting refused clearly."""

from __future__ import annotations

import contextvars
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from agentrt.server._main import _parser, build_settings
from agentrt.server.config import ConfigError, MetricsConfig, Settings
from agentrt.server.telemetry import OTHER, Counters, RuntimeMetrics
from agentrt.testing import MetricSamples, scrape_metrics
from agentrt.toolhost._cli import main as toolhost_main
from agentrt.toolhost.telemetry import (
    EXEMPLAR_FILTER_ENV,
    MetricsConfigError,
    MetricsServer,
    build_meter_provider,
    chosen_exporters,
    read_token_file,
)

TOKEN = "s3cret-metrics-token"


def points(reader: InMemoryMetricReader, name: str) -> list[tuple[dict[str, Any], Any]]:
    """The data points of ``name``, less the zero series every counter starts with."""
    data = reader.get_metrics_data()
    assert data is not None
    found = []
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    found += [
                        (dict(p.attributes or {}), p)
                        for p in metric.data.data_points
                        if p.attributes or getattr(p, "value", None) != 0
                    ]
    return found


def counted() -> tuple[Counters, InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    return Counters(meter, max_tenants=2, max_tools=1), reader


def test_tenants_and_tools_past_the_cap_are_counted_as_other() -> None:
    counters, reader = counted()
    for tenant in ("t1", "t2", "t3", "t4"):
        counters.inc("runs_started", tenant=tenant, agent="a")
    counters.inc("retry_count", tool="one")
    counters.inc("retry_count", tool="two")
    started = {attrs["tenant"]: p.value for attrs, p in points(reader, "agentrt.runs_started")}
    assert started == {"t1": 1, "t2": 1, OTHER: 2}
    retries = {attrs["tool"]: p.value for attrs, p in points(reader, "agentrt.retry_count")}
    assert retries == {"one": 1, OTHER: 1}
    assert counters.get("runs_started") == 4 and counters.get("retry_count") == 2


def test_a_run_binds_its_tenant_and_agent_and_values_are_truncated() -> None:
    counters, reader = counted()

    def in_a_run_task() -> None:  # each run is its own task, so its own context
        counters.bind_run(tenant="acme", agent="x" * 500)
        counters.inc("timeout_count", tool="sleep.wait")
        counters.observe("tool_duration", 0.25, tool="sleep.wait", outcome="timeout")

    contextvars.copy_context().run(in_a_run_task)
    counters.inc("timeout_count", tool="sleep.wait")  # outside the run: no tenant, no agent
    assert sorted((sorted(a.items()), p.value) for a, p in points(reader, "agentrt.timeout_count")) == [
        ([("agent", "x" * 64), ("tenant", "acme"), ("tool", "sleep.wait")], 1),
        ([("tool", "sleep.wait")], 1),
    ]
    [(attrs, point)] = points(reader, "agentrt.tool.call.duration")
    assert attrs["outcome"] == "timeout" and point.count == 1


def test_model_calls_use_the_genai_names_and_attributes() -> None:
    counters, reader = counted()

    class Usage:
        input_tokens, output_tokens = 10, 3

    counters.model_call("openai", "gpt-test", 0.5, Usage())
    [(attrs, point)] = points(reader, "gen_ai.client.operation.duration")
    assert attrs == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-test",
    }
    assert point.sum == 0.5
    tokens = {a["gen_ai.token.type"]: p.sum for a, p in points(reader, "gen_ai.client.token.usage")}
    assert tokens == {"input": 10, "output": 3}


def test_unknown_counters_histograms_and_attributes_are_programming_errors() -> None:
    counters, _ = counted()
    with pytest.raises(KeyError, match="unknown counter"):
        counters.inc("nope")
    with pytest.raises(KeyError, match="unknown metric attribute"):
        counters.inc("retry_count", run_id="r-1")  # a run id never becomes an attribute
    with pytest.raises(KeyError):
        counters.observe("nope", 1.0)
    assert Counters().get("retry_count") == 0  # without a meter: in-process totals only


@pytest.mark.parametrize(
    "env, listen, chosen",
    [
        ({}, "", set()),
        ({}, "127.0.0.1:0", {"prometheus"}),
        ({"OTEL_METRICS_EXPORTER": "none"}, "127.0.0.1:0", set()),
        ({"OTEL_METRICS_EXPORTER": "otlp"}, "", {"otlp"}),
        ({"OTEL_METRICS_EXPORTER": "prometheus, otlp"}, "127.0.0.1:0", {"prometheus", "otlp"}),
        ({"OTEL_METRICS_EXPORTER": "prometheus"}, "", set()),  # inherited by a child without an endpoint
    ],
)
def test_exporters_follow_otel_metrics_exporter(env: dict[str, str], listen: str, chosen: set[str]) -> None:
    assert chosen_exporters(env, listen=listen) == chosen


def test_an_unknown_exporter_or_protocol_is_refused() -> None:
    with pytest.raises(MetricsConfigError, match="unknown exporter"):
        chosen_exporters({"OTEL_METRICS_EXPORTER": "statsd"}, listen="")
    with pytest.raises(MetricsConfigError, match="grpc or http/protobuf"):
        build_meter_provider(
            service_name="t",
            exporters=frozenset({"otlp"}),
            env={"OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"},
        )
    with pytest.raises(ConfigError, match="unknown exporter"):
        RuntimeMetrics.build(MetricsConfig(), env={"OTEL_METRICS_EXPORTER": "statsd"})


@pytest.fixture
def registry() -> CollectorRegistry:
    setup = build_meter_provider(service_name="t", exporters=frozenset({"prometheus"}), env={})
    Counters(setup.provider.get_meter("t")).inc("retry_count", tool="x")
    assert setup.registry is not None
    return setup.registry


def get(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode()


@pytest.fixture
def served(registry: CollectorRegistry) -> Iterator[str]:
    server = MetricsServer(registry=registry, listen="127.0.0.1:0", token=TOKEN)
    address = server.start()
    try:
        yield address
    finally:
        server.stop()


def test_the_endpoint_serves_metrics_only_and_only_with_the_token(served: str) -> None:
    assert get(f"http://{served}/metrics")[0] == 401
    status, body = get(f"http://{served}/metrics", {"Authorization": "Bearer wrong"})
    assert status == 401 and TOKEN not in body
    status, body = get(f"http://{served}/metrics", {"Authorization": f"Bearer {TOKEN}"})
    assert status == 200 and "agentrt_retry_count_total{" in body and TOKEN not in body
    assert get(f"http://{served}/", {"Authorization": f"Bearer {TOKEN}"})[0] == 404
    assert get(f"http://{served}/metrics", {"Authorization": f"Bearer {TOKEN}"}, method="POST")[0] == 405
    scraped = scrape_metrics(served, token=TOKEN)
    assert scraped.value("agentrt_retry_count_total", tool="x") == 1


def test_loopback_needs_no_token_and_elsewhere_one_is_required(registry: CollectorRegistry) -> None:
    server = MetricsServer(registry=registry, listen="127.0.0.1:0")
    address = server.start()
    try:
        assert get(f"http://{address}/metrics")[0] == 200
    finally:
        server.stop()
    with pytest.raises(MetricsConfigError, match="not loopback"):
        MetricsServer(registry=registry, listen="0.0.0.0:0")
    with pytest.raises(ValidationError, match="not loopback"):
        Settings.model_validate({"metrics": {"listen": "0.0.0.0:9464"}})
    with pytest.raises(ValidationError, match="not HOST:PORT"):
        Settings.model_validate({"metrics": {"listen": "9464"}})
    assert Settings.model_validate({"metrics": {"listen": "0.0.0.0:9464", "token_file": "/t"}}).metrics.listen


def test_an_address_in_use_is_a_clear_error(served: str, registry: CollectorRegistry) -> None:
    with pytest.raises(MetricsConfigError, match="cannot serve metrics on"):
        MetricsServer(registry=registry, listen=served).start()


def test_token_files_that_cannot_be_used_are_named_never_shown(tmp_path: Path) -> None:
    with pytest.raises(MetricsConfigError, match="cannot read the metrics token file"):
        read_token_file(str(tmp_path / "missing"))
    (tmp_path / "empty").write_text("  \n")
    with pytest.raises(MetricsConfigError, match="is empty"):
        read_token_file(str(tmp_path / "empty"))
    (tmp_path / "token").write_text(f"{TOKEN}\n")
    assert read_token_file(str(tmp_path / "token")) == TOKEN
    with pytest.raises(ConfigError, match="cannot read the metrics token file") as raised:
        RuntimeMetrics.build(MetricsConfig(listen="127.0.0.1:0", token_file=str(tmp_path / "missing")))
    assert TOKEN not in str(raised.value)


def test_the_command_lines_refuse_bad_metrics_flags(tmp_path: Path) -> None:
    args = _parser().parse_args(["--metrics-listen", "0.0.0.0:9464"])
    with pytest.raises(ConfigError, match="not loopback"):
        build_settings(args)
    assert build_settings(_parser().parse_args(["--metrics-listen", "127.0.0.1:0"])).metrics.listen
    base = ["--no-entrypoints", "--data-dir", str(tmp_path / "host")]
    assert toolhost_main([*base, "--metrics-listen", "0.0.0.0:0"]) == 2
    assert toolhost_main([*base, "--metrics-listen", "nope"]) == 2
    assert toolhost_main([*base, "--metrics-token-file", str(tmp_path / "missing")]) == 2
    assert not (tmp_path / "host").exists()  # refused before anything was created


class Receiver(metrics_service_pb2_grpc.MetricsServiceServicer):
    """An OTLP MetricsService: what an OpenTelemetry Collector receives."""

    def __init__(self) -> None:
        self.requests: list[metrics_service_pb2.ExportMetricsServiceRequest] = []

    def Export(
        self, request: metrics_service_pb2.ExportMetricsServiceRequest, context: grpc.ServicerContext
    ) -> metrics_service_pb2.ExportMetricsServiceResponse:
        self.requests.append(request)
        return metrics_service_pb2.ExportMetricsServiceResponse()


def test_otlp_export_is_configured_by_otel_variables_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    receiver = Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(receiver, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        env = {
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_SERVICE_NAME": "metrics-test",
        }
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        metrics = RuntimeMetrics.build(MetricsConfig(), env=env)
        metrics.counters.inc("lease_lost_count")
        metrics._provider.shutdown()  # the final flush SIGTERM runs too
    finally:
        server.stop(0)
    names = {
        m.name
        for r in receiver.requests
        for rm in r.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    assert "agentrt.lease_lost_count" in names
    services = {
        a.value.string_value
        for r in receiver.requests
        for rm in r.resource_metrics
        for a in rm.resource.attributes
        if a.key == "service.name"
    }
    assert services == {"metrics-test"}


def exported_exemplars(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> int:
    """How many exemplars an OTLP export carries for counts made inside a sampled span."""
    from opentelemetry.sdk.trace import TracerProvider

    receiver = Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(receiver, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        env = {
            **env,
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        }
        for key, value in env.items():  # the OTLP exporter reads its endpoint from the process
            monkeypatch.setenv(key, value)
        setup = build_meter_provider(service_name="t", exporters=frozenset({"otlp"}), env=env)
        counters = Counters(setup.provider.get_meter("t"))
        with TracerProvider().get_tracer("t").start_as_current_span("sampled"):
            counters.inc("retry_count", tool="x")
            counters.observe("tool_duration", 0.25, tool="x", outcome="ok")
        setup.provider.shutdown()
    finally:
        server.stop(0)
    points = [
        point
        for r in receiver.requests
        for rm in r.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        for point in [*m.sum.data_points, *m.histogram.data_points]
    ]
    assert points, "nothing was exported"
    return sum(len(point.exemplars) for point in points)


@pytest.mark.parametrize(
    ("env", "expected"),
    [({}, False), ({EXEMPLAR_FILTER_ENV: "always_off"}, False), ({EXEMPLAR_FILTER_ENV: "trace_based"}, True)],
)
def test_exemplars_are_off_unless_the_standard_variable_asks(
    env: dict[str, str], expected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (exported_exemplars(env, monkeypatch) > 0) is expected


def test_an_unknown_exemplar_filter_is_refused_by_name() -> None:
    with pytest.raises(MetricsConfigError, match="OTEL_METRICS_EXEMPLAR_FILTER 'sometimes'"):
        build_meter_provider(
            service_name="t", exporters=frozenset({"prometheus"}), env={EXEMPLAR_FILTER_ENV: "sometimes"}
        )
    with pytest.raises(ConfigError, match="always_off, always_on, trace_based"):
        RuntimeMetrics.build(
            MetricsConfig(), env={"OTEL_METRICS_EXPORTER": "otlp", EXEMPLAR_FILTER_ENV: "sometimes"}
        )


def test_the_sample_parser_reads_the_text_format_and_refuses_garbage() -> None:
    text = '# TYPE x_total counter\nx_total{a="1",b="q\\"t"} 2.0\nx_total{a="2"} 3\ny 1.5e+00\n'
    samples = MetricSamples.parse(text)
    assert (
        samples.value("x_total") == 5 and samples.value("x_total", a="1") == 2 and samples.value("y") == 1.5
    )
    assert samples.names() == {"x_total", "y"}
    with pytest.raises(ValueError, match="not a Prometheus sample line"):
        MetricSamples.parse("{broken\n")


def test_the_hosts_word_that_the_deadline_stopped_a_call_is_a_typed_timeout() -> None:
    from agentrt.proto.toolhost.v1 import tool_pb2
    from agentrt.server.tools._router import host_failure

    def failure(details: str, code: int = tool_pb2.TOOL_ERROR_CODE_TRANSIENT) -> Any:
        return host_failure(tool_pb2.ToolError(code=code, message="timeout", details_json=details))

    stopped = failure('{"effect": "unknown", "deadline_exceeded": true}')
    assert stopped.host_timed_out and stopped.host_unsure and not stopped.timed_out
    assert failure('{"still_running": true, "deadline_exceeded": true}').host_timed_out
    assert not failure('{"effect": "unknown"}').host_timed_out  # a stop for another reason
    assert not failure('{"deadline_exceeded": "yes"}').host_timed_out  # only the typed true
    assert not failure('{"deadline_exceeded": true}', tool_pb2.TOOL_ERROR_CODE_PERMANENT).host_timed_out


async def test_a_write_the_host_stopped_at_its_deadline_counts_one_timeout_and_stays_unknown() -> None:
    from agentrt.server.tools import ToolOutcome
    from tests.unit.test_engine_tool_outcomes import world_with

    stopped = ToolOutcome.failure(
        "TRANSIENT",
        "timeout: the call overran its deadline",
        details_json='{"effect": "unknown", "deadline_exceeded": true}',
        host_unsure=True,
        host_timed_out=True,
    )
    world, _ = world_with(answer=stopped)
    run_id = world.create_run()
    await world.drive(run_id)
    assert world.log.phase(run_id) == "UNKNOWN_OUTCOME"  # the verdict is the host_unsure one
    assert world.counters.get("timeout_count") == 1 and world.counters.get("retry_count") == 0
