"""Tracing set-up from OTEL_* variables and the [tracing] section, and the span helpers' contract.

The providers here are built, not installed (``build_provider``): the global tracer provider can
be set once per process, and other tests in this process must stay untraced.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from pydantic import ValidationError

from agentrt.server import telemetry
from agentrt.server.config import Settings, TracingConfig
from agentrt.server.core import redact_secrets
from agentrt.server.telemetry import _tracing
from agentrt.testing.otlp import OtlpReceiver
from agentrt.toolhost.tracing import TracingError, TracingOptions, build_provider, options_from_env


def test_tracing_is_off_by_default_and_installs_nothing() -> None:
    assert Settings().tracing == TracingConfig()
    options = telemetry.tracing_options(TracingConfig(), env={})
    assert options.exporter == "none"
    assert build_provider(options, default_service_name="x") is None
    assert telemetry.setup_tracing(TracingConfig(), env={}) is None


def test_otel_variables_alone_turn_it_on_and_win_over_the_section() -> None:
    section = TracingConfig(exporter="console", protocol="grpc", service_name="from-file", sampler_arg=0.5)
    env = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
        "OTEL_SERVICE_NAME": "from-env",
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.25",
    }
    options = telemetry.tracing_options(section, env=env)
    assert options == TracingOptions(
        exporter="otlp",
        protocol="http/protobuf",
        endpoint="",  # the exporter reads OTEL_EXPORTER_OTLP_ENDPOINT itself
        service_name="from-env",
        sampler="parentbased_traceidratio",
        sampler_arg=0.25,
    )
    # The signal-specific protocol variable wins over the general one.
    traces_only = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
    }
    assert options_from_env(traces_only).protocol == "http/protobuf"
    # Without variables, the section stands.
    assert telemetry.tracing_options(section, env={}).exporter == "console"
    assert telemetry.tracing_options(section, env={}).service_name == "from-file"


def test_otel_sdk_disabled_turns_a_configured_exporter_off() -> None:
    options = telemetry.tracing_options(TracingConfig(exporter="otlp"), env={"OTEL_SDK_DISABLED": "true"})
    assert options.exporter == "none"


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "exporter 'zipkin'"),
        ({"OTEL_TRACES_EXPORTER": "otlp,console"}, "one exporter"),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "protocol 'http/json'"),
        ({"OTEL_TRACES_SAMPLER": "sometimes"}, "sampler 'sometimes'"),
        ({"OTEL_TRACES_SAMPLER_ARG": "half"}, "must be a number"),
        ({"OTEL_TRACES_SAMPLER_ARG": "2"}, "ratio in [0, 1]"),
    ],
)
def test_a_bad_otel_value_is_a_clear_error(env: dict[str, str], words: str) -> None:
    with pytest.raises(TracingError, match=words.replace("[", r"\[").replace("]", r"\]")):
        options_from_env(env)


def test_a_bad_tracing_section_is_refused() -> None:
    with pytest.raises(ValidationError):
        TracingConfig.model_validate({"exporter": "jaeger"})
    with pytest.raises(ValidationError):
        TracingConfig.model_validate({"sampler_arg": 1.5})
    with pytest.raises(ValidationError):
        TracingConfig.model_validate({"endpoint_url": "http://x"})


def test_content_capture_needs_both_the_section_and_the_genai_variable() -> None:
    on = {telemetry.CAPTURE_CONTENT_ENV: "true"}
    try:
        for capture, env, expected in [
            (False, {}, False),
            (True, {}, False),
            (False, on, False),
            (True, {telemetry.CAPTURE_CONTENT_ENV: "yes"}, False),
            (True, on, True),
        ]:
            telemetry.setup_tracing(TracingConfig(capture_content=capture), env=env)
            assert _tracing._capture is expected, (capture, env)
    finally:
        telemetry.setup_tracing(TracingConfig(), env={})


def test_content_is_redacted_before_it_goes_on_a_span() -> None:
    text = "key sk-abcdefghijklmnopqrstuvwx and https://user:pw@host/x and the profile's s3cret-value"
    redacted = redact_secrets(text, ("s3cret-value",))
    assert "sk-abcdefghijklmnopqrstuvwx" not in redacted
    assert "user:pw" not in redacted and "s3cret-value" not in redacted
    assert redacted.count("[redacted]") == 3


def test_traceparent_and_trace_id_helpers() -> None:
    assert telemetry.current_traceparent() == ""  # no valid span here
    assert telemetry.trace_id_of("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01") == (
        "0af7651916cd43dd8448eb211c80319c"
    )
    assert telemetry.trace_id_of("") == ""
    assert telemetry.trace_id_of("garbage") == ""


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver.running() as running:
        yield running


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_spans_reach_a_real_receiver_over_either_protocol(receiver: OtlpReceiver, protocol: str) -> None:
    endpoint = receiver.grpc_endpoint if protocol == "grpc" else receiver.http_endpoint
    options = TracingOptions(exporter="otlp", protocol=protocol, endpoint=endpoint, service_name="unit")
    provider = build_provider(options, default_service_name="default")
    assert isinstance(provider, TracerProvider)
    with provider.get_tracer("t").start_as_current_span(f"over {protocol}"):
        pass
    assert provider.force_flush(5000)
    provider.shutdown()
    (span,) = receiver.wait_for_spans(lambda got: len(got) == 1, timeout=10)
    assert (span.name, span.service_name) == (f"over {protocol}", "unit")
    if protocol == "http/protobuf":
        assert receiver.http_paths == ["/v1/traces"]  # the configured base plus the signal's path


def test_the_console_exporter_writes_to_stderr_never_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    provider = build_provider(TracingOptions(exporter="console"), default_service_name="cons")
    assert provider is not None
    with provider.get_tracer("t").start_as_current_span("to the console"):
        pass
    provider.shutdown()
    captured = capsys.readouterr()
    assert "to the console" in captured.err and captured.out == ""  # stdout has the ready line


def test_the_sampler_follows_the_options() -> None:
    off = build_provider(TracingOptions(exporter="console", sampler="always_off"), default_service_name="s")
    assert off is not None
    with off.get_tracer("t").start_as_current_span("dropped") as span:
        assert not span.is_recording()
    off.shutdown()


def test_span_helpers_are_no_ops_without_a_provider() -> None:
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)  # nothing installed
    with telemetry.run_span(
        trace_context="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        agent="a",
        run_id="r",
        tenant_id="t",
        session_id="",
        resumed=False,
    ) as span:
        # Untraced, the stored context still passes on: calls made now carry the caller's trace.
        assert not span.is_recording()
        assert telemetry.current_traceparent().startswith("00-0af7651916cd43dd8448eb211c80319c-")
        telemetry.span_event("wait", seconds=1.0)  # no error on a non-recording span


def test_a_stored_context_that_is_not_a_traceparent_starts_a_new_trace() -> None:
    with telemetry.run_span(
        trace_context="not-a-traceparent", agent="a", run_id="r", tenant_id="t", session_id="", resumed=True
    ):
        assert telemetry.current_traceparent() == ""  # no-op root: nothing to continue, no error
