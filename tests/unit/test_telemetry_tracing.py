"""Tracing set-up from OTEL_* variables and the [tracing] section, and the span helpers' contract.

The providers here are built, not installed (``build_provider``): the global tracer provider can
be set once per process, and other tests in this process must stay untraced.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk import trace as sdk_trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import ValidationError

from agentrt.server import telemetry
from agentrt.server.config import Settings, TracingConfig
from agentrt.server.core import CallState, ToolOutcome, redact_secrets
from agentrt.server.models import (
    Message,
    ModelRequest,
    ModelResponse,
    ModelSpecData,
    ModelToolCall,
    ModelTransientError,
)
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
    # The signal's own endpoint variable wins over a configured endpoint too.
    configured = TracingConfig(exporter="otlp", endpoint="http://from-file:4318")
    assert telemetry.tracing_options(configured, env={}).endpoint == "http://from-file:4318"
    signal_env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://from-env:4318/v1/traces"}
    assert telemetry.tracing_options(configured, env=signal_env).endpoint == ""
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
    assert telemetry.trace_id_of("00-" + "0" * 32 + "-b7ad6b7169203331-01") == ""  # the invalid id
    assert telemetry.trace_id_of("00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01") == ""
    # Whitespace around a header value is not part of it (HTTP's OWS); the id inside still reads.
    assert telemetry.trace_id_of("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\n") == (
        "0af7651916cd43dd8448eb211c80319c"
    )


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


# -- the span helpers, recorded by a real SDK provider of this test's own ---------------------------


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """The helpers' tracer from a provider of the test's (the global one stays unset)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(_tracing, "_tracer", lambda: provider.get_tracer("agentrt.runtime"))
    try:
        yield exporter
    finally:
        provider.shutdown()
        telemetry.setup_tracing(TracingConfig(), env={})  # content capture off again


SECRET = "sk-abcdefghijklmnopqrstuvwx"
PROFILE_SECRET = "https://gateway.internal/v1?token=s3cret"


def _request() -> ModelRequest:
    return ModelRequest(
        run_id="r1",
        step=2,
        spec=ModelSpecData(provider="openai", name="gpt-x", options={}),
        messages=(
            Message(role="system", content="be brief"),
            Message(role="user", content=f"my key is {SECRET} at {PROFILE_SECRET}"),
        ),
        tools=(),
        timeout_s=5.0,
    )


def _response() -> ModelResponse:
    return ModelResponse(
        text=f"noted {SECRET}",
        tool_calls=(ModelToolCall(call_id="c1", tool="orders.lookup", arguments_json='{"id": 1}'),),
        input_tokens=12,
        output_tokens=3,
        finish_reason="tool_calls",
        response_id="chatcmpl-7",
    )


async def _answer() -> ModelResponse:
    return _response()


async def test_a_chat_span_carries_the_genai_attributes_and_no_content_by_default(
    recorded: InMemorySpanExporter,
) -> None:
    response = await telemetry.traced_chat(_request(), _answer, conversation_id="s1")
    assert response == _response()
    (span,) = recorded.get_finished_spans()
    assert (span.name, span.kind) == ("chat gpt-x", trace.SpanKind.CLIENT)
    assert dict(span.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-x",
        "gen_ai.conversation.id": "s1",
        "agentrt.run_id": "r1",
        "agentrt.step": 2,
        "gen_ai.response.model": "gpt-x",
        "gen_ai.response.id": "chatcmpl-7",
        "gen_ai.response.finish_reasons": ("tool_calls",),
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 3,
    }


async def test_opted_in_contents_are_redacted(recorded: InMemorySpanExporter) -> None:
    telemetry.setup_tracing(TracingConfig(capture_content=True), env={telemetry.CAPTURE_CONTENT_ENV: "true"})
    await telemetry.traced_chat(_request(), _answer, conversation_id="s1", secrets=(PROFILE_SECRET,))
    (span,) = recorded.get_finished_spans()
    attributes = dict(span.attributes or {})
    sent = json.loads(str(attributes["gen_ai.input.messages"]))
    assert [m["role"] for m in sent] == ["system", "user"]
    said = json.loads(str(attributes["gen_ai.output.messages"]))
    assert said[0]["parts"][1] == {
        "type": "tool_call",
        "id": "c1",
        "name": "orders.lookup",
        "arguments": '{"id": 1}',
    }
    text = json.dumps(attributes)
    assert SECRET not in text and "s3cret" not in text and "[redacted]" in text


async def test_a_failed_model_attempt_names_its_reason_and_never_its_message(
    recorded: InMemorySpanExporter,
) -> None:
    async def fail() -> ModelResponse:
        raise ModelTransientError(f"upstream said {SECRET}", reason="rate_limited")

    with pytest.raises(ModelTransientError):
        await telemetry.traced_chat(_request(), fail, conversation_id="s1")
    (span,) = recorded.get_finished_spans()
    assert span.attributes is not None and span.attributes["error.type"] == "rate_limited"
    assert span.status.status_code is trace.StatusCode.ERROR and span.status.description == "rate_limited"
    assert not span.events


async def test_a_tool_span_names_the_call_and_its_error_code(recorded: InMemorySpanExporter) -> None:
    call = CallState(
        call_id="c9", tool="refund.issue", arguments_json=f'{{"key": "{SECRET}"}}', index=0, step=3
    )
    call.attempts = 2

    async def refused() -> ToolOutcome:
        return ToolOutcome.failure("UNAUTHORIZED", f"bad token {SECRET}")

    outcome = await telemetry.traced_tool(call, refused)
    assert outcome.error is not None
    (span,) = recorded.get_finished_spans()
    assert span.name == "execute_tool refund.issue"
    assert dict(span.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "refund.issue",
        "gen_ai.tool.call.id": "c9",
        "agentrt.attempt": 2,
        "error.type": "TOOL_ERROR_CODE_UNAUTHORIZED",
    }
    assert span.status.description == "TOOL_ERROR_CODE_UNAUTHORIZED"
    telemetry.setup_tracing(TracingConfig(capture_content=True), env={telemetry.CAPTURE_CONTENT_ENV: "true"})

    async def answered() -> ToolOutcome:
        return ToolOutcome(f'{{"echo": "{SECRET}"}}', None)

    await telemetry.traced_tool(call, answered)
    attributes = dict(recorded.get_finished_spans()[-1].attributes or {})
    assert "gen_ai.tool.call.arguments" in attributes and "gen_ai.tool.call.result" in attributes
    assert SECRET not in json.dumps(attributes)


async def test_an_exception_through_the_run_span_is_recorded_by_its_type_alone(
    recorded: InMemorySpanExporter,
) -> None:
    with (
        pytest.raises(RuntimeError),
        telemetry.run_span(
            trace_context="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            agent="support",
            run_id="r1",
            tenant_id="acme",
            session_id="",
            resumed=True,
        ),
        telemetry.step_span(run_id="r1", step=1, kind="model") as step,
    ):
        assert telemetry.current_traceparent().split("-")[2] == format(
            step.get_span_context().span_id, "016x"
        )
        telemetry.span_event("retry_scheduled", attempt=2, delay_s=0.5)
        raise RuntimeError(f"boom with {SECRET}")
    step_span, run = recorded.get_finished_spans()
    assert run.name == "invoke_agent support" and run.parent is not None
    assert run.parent.span_id == 0xB7AD6B7169203331  # under the run's stored root context
    assert run.context.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert step_span.parent is not None and step_span.parent.span_id == run.context.span_id
    assert [e.name for e in step_span.events] == ["agentrt.retry_scheduled"]
    for span in (step_span, run):
        assert span.status.description == "RuntimeError"
        assert span.attributes is not None and span.attributes["error.type"] == "RuntimeError"
        assert SECRET not in repr(span.to_json())


async def test_a_cancelled_step_is_no_error_and_the_outer_context_comes_back(
    recorded: InMemorySpanExporter,
) -> None:
    before = trace.get_current_span()
    with pytest.raises(asyncio.CancelledError), telemetry.step_span(run_id="r1", step=3, kind="tool") as step:
        assert trace.get_current_span() is step
        raise asyncio.CancelledError  # a shutdown or a cut call: a BaseException, not an error
    assert trace.get_current_span() is before
    (span,) = recorded.get_finished_spans()
    assert span.end_time is not None and span.status.status_code is trace.StatusCode.UNSET
    assert "error.type" not in (span.attributes or {})


def test_the_runtime_tracer_is_the_installed_providers_own_and_looked_up_once_per_provider(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_tracing, "_resolved", None)
    assert _tracing._tracer() is None  # nothing installed: nothing could be recorded
    first, second = TracerProvider(), TracerProvider()
    try:
        installed: list[object] = [first]
        monkeypatch.setattr(_tracing.trace, "get_tracer_provider", lambda: installed[0])
        tracer = _tracing._tracer()
        assert isinstance(tracer, sdk_trace.Tracer)  # no ProxyTracer in between
        assert _tracing._tracer() is tracer
        installed[0] = second  # another provider (a test's own): its own tracer
        other = _tracing._tracer()
        assert isinstance(other, sdk_trace.Tracer) and other is not tracer
    finally:
        first.shutdown()
        second.shutdown()
