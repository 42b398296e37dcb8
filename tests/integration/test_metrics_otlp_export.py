"""OTLP metrics from real processes, configured by OTEL_* variables alone: a runtime and a tool host
push to a receiver speaking the OTLP MetricsService protocol, and SIGTERM flushes the last counts
(the export interval is far longer than the test, so only the shutdown export can deliver them)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc

from agentrt.client import Client
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import RuntimeProcess, start_tool_host
from tests.e2e.conftest import write_config
from tests.unit.test_telemetry_metrics import Receiver


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, int]]:
    found = Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(found, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield found, port
    finally:
        server.stop(0)


def exported(receiver: Receiver, service: str) -> dict[str, float]:
    """Sum of each metric's number points from ``service``'s exports (the last cumulative one)."""
    totals: dict[str, float] = {}
    for request in receiver.requests:
        for rm in request.resource_metrics:
            names = {a.value.string_value for a in rm.resource.attributes if a.key == "service.name"}
            if service not in names:
                continue
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    data = metric.sum if metric.HasField("sum") else None
                    if data is not None:
                        totals[metric.name] = sum(p.as_int or p.as_double for p in data.data_points)
    return totals


def test_sigterm_pushes_the_last_counts_of_the_runtime_and_the_tool_host(
    tmp_path: Path, sqlite_url: str, receiver: tuple[Receiver, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    found, port = receiver
    otel = {
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_METRIC_EXPORT_INTERVAL": "600000",
    }
    for key, value in {**otel, "OTEL_SERVICE_NAME": "test-toolhost"}.items():
        monkeypatch.setenv(key, value)  # the host child copies this process's environment
    host = start_tool_host(tmp_path / "host", plugins=["agentrt.plugins.demo_tools"])
    env = {**os.environ, **otel}
    try:
        config = write_config(tmp_path / "agentrt.toml", db_url=sqlite_url, tool_host_address=host.address)
        runtime = RuntimeProcess(
            ["--config", str(config), "--listen", "127.0.0.1:0", "--metrics-listen", ""],
            cwd=tmp_path,
            env={**env, "OTEL_SERVICE_NAME": "test-runtime"},
        )
        try:
            runtime.wait_ready(60)
            with Client(runtime.address) as client:
                run_id = client.start_run("refund", "Please refund A100").run_id
                events = [e for e in client.stream_events(run_id, follow=True, timeout=60) if e.seq]
            assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
            assert exported(found, "test-runtime") == {}  # nothing yet: the interval is 10 minutes
            assert runtime.stop() == 0
        finally:
            runtime.close()
    finally:
        host.stop()
    counts = exported(found, "test-runtime")
    assert counts["agentrt.runs_started"] == 1 and counts["agentrt.runs_ended"] == 1
    assert counts["agentrt.steps"] >= 3
    assert exported(found, "test-toolhost")["agentrt.toolhost.events"] >= 2  # two calls, two successes
