"""Tracing of runs with OpenTelemetry, named and attributed by the GenAI semantic conventions.

Spans of one run, under the trace of the call that started it (its context is stored on the
run's row, ``runs.trace_context``, so a run resumed by another replica or after a crash goes on
in the same trace)::

    invoke_agent {agent}          one per ownership period of the run (each resume makes one)
      agentrt.step {kind}         one per model or tool step
        chat {model}              one per model attempt (gen_ai.usage.*, gen_ai.response.*)
        execute_tool {tool}       one per tool attempt; its traceparent goes to the tool host

Waits (a retry's backoff, an approval, an unknown outcome, a reconcile, parking) are span events
on the current span. Message and argument contents go on spans only when both the ``[tracing]``
section's ``capture_content`` and ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``
opt in, and they are redacted first.

Off by default: without an exporter no SDK is installed and every span here is the API's no-op
(the caller's trace context still passes through to tool hosts and model providers).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Awaitable, Callable, Mapping
from contextvars import Token
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace

from agentrt.server.config import TracingConfig
from agentrt.server.core import CallState, ToolOutcome, redact_secrets, trace_id_of
from agentrt.server.models import ModelError, ModelRequest, ModelResponse
from agentrt.toolhost.tracing import TracingOptions, install_tracing, options_from_env, shutdown_tracing

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "current_traceparent",
    "run_span",
    "setup_tracing",
    "shutdown_tracing",
    "span_event",
    "step_span",
    "trace_id_of",
    "traced_chat",
    "traced_tool",
    "tracing_options",
]

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_TRACER = "agentrt.runtime"
_MAX_CONTENT = 16 * 1024  # characters of one content attribute: spans stay small
_capture = False  # set once per process by setup_tracing (like the global tracer provider)


def tracing_options(config: TracingConfig, env: Mapping[str, str] | None = None) -> TracingOptions:
    """The ``[tracing]`` section with the standard ``OTEL_*`` variables set in ``env`` on top.

    Raises:
        TracingError: an ``OTEL_*`` value not allowed.
    """
    base = TracingOptions(
        exporter=config.exporter,
        protocol=config.protocol,
        endpoint=config.endpoint,
        service_name=config.service_name,
        sampler=config.sampler,
        sampler_arg=config.sampler_arg,
    )
    return options_from_env(env, base=base)


def setup_tracing(config: TracingConfig, env: Mapping[str, str] | None = None) -> TracerProvider | None:
    """Install the process's tracer provider (None when tracing is off) and the content opt-in.

    Raises:
        TracingError: an ``OTEL_*`` value not allowed, or an exporter whose package is missing.
    """
    global _capture
    env = os.environ if env is None else env
    _capture = config.capture_content and env.get(CAPTURE_CONTENT_ENV, "").strip().lower() == "true"
    return install_tracing(tracing_options(config, env), default_service_name="agentrt-runtime")


# The installed provider's own tracer, looked up once per provider: a ProxyTracer would add a
# delegation layer to every span.
_resolved: tuple[object, trace.Tracer] | None = None


def _tracer() -> trace.Tracer | None:
    """The runtime's tracer; None while no provider is installed (nothing could be recorded)."""
    global _resolved
    provider = trace.get_tracer_provider()
    if _resolved is not None and _resolved[0] is provider:
        return _resolved[1]
    if isinstance(provider, trace.ProxyTracerProvider):
        return None
    _resolved = (provider, provider.get_tracer(_TRACER))
    return _resolved[1]


class _Current:
    """A span (or, untraced, only a context) made current for one ``with`` block.

    One small class instead of nested generator context managers (``_span``, the SDK's
    ``start_as_current_span`` and ``use_span``): the same span, parent and current context, at
    a fraction of the cost per span. An escaping exception is recorded by its type only: its
    text may quote a secret (a fault's message is redacted before it enters an event; the
    SDK's default would copy it and the stack into the span).
    """

    __slots__ = ("_context", "_span", "_token")

    def __init__(self, span: trace.Span | None, context: otel_context.Context | None) -> None:
        self._span = span
        self._context = context
        self._token: Token[otel_context.Context] | None = None

    def __enter__(self) -> trace.Span:
        span = self._span
        if span is None:  # untraced: only the given context (if any) becomes current
            if self._context is not None:
                self._token = otel_context.attach(self._context)
            return trace.get_current_span()
        # Like use_span: the span goes on the current context (not on a given parent's).
        self._token = otel_context.attach(trace.set_span_in_context(span))
        return span

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if self._token is not None:
            otel_context.detach(self._token)
        span = self._span
        if span is None:
            return
        # Not CancelledError (a BaseException): a shutdown or a cut call is no error here. A
        # helper that named the error (a model's reason) keeps its word.
        if (
            isinstance(exc, Exception)
            and span.is_recording()
            and not (getattr(span, "attributes", None) or {}).get("error.type")
        ):
            span.set_attribute("error.type", type(exc).__name__)
            span.set_status(trace.Status(trace.StatusCode.ERROR, type(exc).__name__))
        span.end()


def _span(
    name: str,
    *,
    attributes: Mapping[str, Any],
    kind: trace.SpanKind = trace.SpanKind.INTERNAL,
    context: otel_context.Context | None = None,
) -> _Current:
    """A current span that records an escaping exception by its type only.

    Untraced, no span is made (the API's no-op costs ~14 us): ``context``, if given, is made
    current as it is, so what is sent from inside still carries the run's trace context.
    """
    tracer = _tracer()
    if tracer is None:
        return _Current(None, context)
    span = tracer.start_span(
        name,
        context=context,
        kind=kind,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    )
    return _Current(span, None)


def current_traceparent() -> str:
    """The W3C ``traceparent`` of the current span ("" without a valid one)."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier.get("traceparent", "")


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_CONTENT else text[:_MAX_CONTENT] + "[...]"


def run_span(
    *, trace_context: str, agent: str, run_id: str, tenant_id: str, session_id: str, resumed: bool
) -> contextlib.AbstractContextManager[trace.Span]:
    """``invoke_agent {agent}`` for one ownership period, child of the run's stored root context."""
    parent = propagate.extract(
        {"traceparent": trace_context} if trace_context else {}, context=otel_context.Context()
    )
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent,
        "gen_ai.conversation.id": session_id or run_id,
        "agentrt.run_id": run_id,
        "agentrt.tenant_id": tenant_id,
        "agentrt.resumed": resumed,
    }
    return _span(f"invoke_agent {agent}", context=parent, attributes=attributes)


def step_span(*, run_id: str, step: int, kind: str) -> contextlib.AbstractContextManager[trace.Span]:
    """One step of the run (a model step, a tool call or a batch of them), current while it runs."""
    attributes: dict[str, Any] = {"agentrt.run_id": run_id, "agentrt.step": step, "agentrt.step.kind": kind}
    return _span(f"agentrt.step {kind}", attributes=attributes)


def span_event(name: str, **attributes: str | int | float | bool) -> None:
    """A wait or decision of the run, as an event of the current span (a no-op when untraced)."""
    span = trace.get_current_span()
    if span.is_recording():
        span.add_event(f"agentrt.{name}", attributes=attributes)


def _messages_json(request: ModelRequest, redact: Callable[[str], str]) -> str:
    messages = [
        {
            "role": m.role,
            "parts": [{"type": "text", "content": redact(m.content)}]
            + [
                {"type": "tool_call", "id": c.call_id, "name": c.tool, "arguments": redact(c.arguments_json)}
                for c in m.tool_calls
            ],
            **({"tool_call_id": m.tool_call_id} if m.tool_call_id else {}),
        }
        for m in request.messages
    ]
    return _clip(json.dumps(messages))


def _output_json(response: ModelResponse, redact: Callable[[str], str]) -> str:
    parts: list[dict[str, Any]] = (
        [{"type": "text", "content": redact(response.text)}] if response.text else []
    )
    parts += [
        {"type": "tool_call", "id": c.call_id, "name": c.tool, "arguments": redact(c.arguments_json)}
        for c in response.tool_calls
    ]
    return _clip(json.dumps([{"role": "assistant", "parts": parts, "finish_reason": response.finish_reason}]))


async def traced_chat(
    request: ModelRequest,
    call: Callable[[], Awaitable[ModelResponse]],
    *,
    conversation_id: str,
    secrets: tuple[str, ...] = (),
) -> ModelResponse:
    """Make one model attempt inside its ``chat {model}`` span (its HTTP call carries traceparent).

    Raises:
        ModelError: what ``call`` raised (recorded as the span's ``error.type``).
    """
    spec = request.spec
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": spec.provider,
        "gen_ai.request.model": spec.name,
        "gen_ai.conversation.id": conversation_id,
        "agentrt.run_id": request.run_id,
        "agentrt.step": request.step,
    }
    if request.purpose != "step":
        attributes["agentrt.purpose"] = request.purpose
    with _span(f"chat {spec.name}", kind=trace.SpanKind.CLIENT, attributes=attributes) as span:
        recording = span.is_recording()
        if recording and _capture:
            span.set_attribute(
                "gen_ai.input.messages", _messages_json(request, lambda t: redact_secrets(t, secrets))
            )
        try:
            response = await call()
        except ModelError as exc:
            span.set_attribute("error.type", exc.reason)
            span.set_status(trace.Status(trace.StatusCode.ERROR, exc.reason))
            raise
        if recording:
            span.set_attributes(
                {
                    "gen_ai.response.model": spec.name,
                    "gen_ai.response.id": response.response_id,
                    "gen_ai.response.finish_reasons": [response.finish_reason]
                    if response.finish_reason
                    else [],
                    "gen_ai.usage.input_tokens": response.input_tokens,
                    "gen_ai.usage.output_tokens": response.output_tokens,
                }
            )
            if _capture:
                span.set_attribute(
                    "gen_ai.output.messages", _output_json(response, lambda t: redact_secrets(t, secrets))
                )
        return response


async def traced_tool(call: CallState, send: Callable[[], Awaitable[ToolOutcome]]) -> ToolOutcome:
    """Make one tool attempt inside its ``execute_tool {tool}`` span.

    ``send`` builds the call's metadata inside the span, so the tool host continues this span.
    """
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.tool,
        "gen_ai.tool.call.id": call.call_id,
        "agentrt.attempt": call.attempts,
    }
    with _span(f"execute_tool {call.tool}", attributes=attributes) as span:
        if span.is_recording() and _capture:
            span.set_attribute("gen_ai.tool.call.arguments", _clip(redact_secrets(call.arguments_json)))
        outcome = await send()
        if span.is_recording():
            if outcome.error is not None:
                code = f"TOOL_ERROR_CODE_{outcome.error.code.value}"
                span.set_attribute("error.type", code)
                span.set_status(trace.Status(trace.StatusCode.ERROR, code))
            elif _capture and outcome.result_json:
                span.set_attribute("gen_ai.tool.call.result", _clip(redact_secrets(outcome.result_json)))
        return outcome
