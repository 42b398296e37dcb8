"""agentrt.testing.otlp: the receiver takes what the SDK's own OTLP exporters send, metrics and
spans, over gRPC and HTTP/protobuf, and refuses what is not OTLP."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader

from agentrt.testing.otlp import OtlpReceiver


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver.running() as running:
        yield running


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_metrics_arrive_over_either_protocol(receiver: OtlpReceiver, protocol: str) -> None:
    exporter: MetricExporter = (
        GrpcMetrics(endpoint=receiver.grpc_endpoint, insecure=True)
        if protocol == "grpc"
        else HttpMetrics(endpoint=f"{receiver.http_endpoint}/v1/metrics")
    )
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(metric_readers=[reader])
    provider.get_meter("m").create_counter("probe_total").add(3, {"tool": "t"})
    provider.force_flush(10_000)
    provider.shutdown()
    (request, *_) = receiver.metrics
    names = [m.name for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics]
    assert "probe_total" in names


def test_what_is_not_otlp_is_refused_and_nothing_is_kept(receiver: OtlpReceiver) -> None:
    wrong_path = urllib.request.Request(f"{receiver.http_endpoint}/v1/other", data=b"", method="POST")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(wrong_path, timeout=10)
    assert caught.value.code == 404
    caught.value.close()
    garbage = urllib.request.Request(
        f"{receiver.http_endpoint}/v1/traces", data=b"\xff\xff\xff", method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(garbage, timeout=10)
    assert caught.value.code == 400
    caught.value.close()
    assert receiver.spans == [] and receiver.metrics == []
    with pytest.raises(TimeoutError, match="did not arrive"):
        receiver.wait_for_spans(lambda got: bool(got), timeout=0.2)
