"""OpenTelemetry tracing of a process: a TracerProvider from the standard ``OTEL_*`` variables, and a
gRPC server interceptor that continues the caller's W3C ``traceparent``.

Shared by the tool host and the runtime (which adds its ``[tracing]`` config section on top).
Tracing is off unless an exporter is chosen (``OTEL_TRACES_EXPORTER=otlp|console``): then no
provider is installed, spans are the API's no-ops, and an incoming ``traceparent`` still reaches
the handler as its current (non-recording) span, so the trace is continued downstream.

Needs the ``otel`` extra (``agentrt-toolhost[otel]``); without OpenTelemetry installed the
interceptor is a pass-through and asking for an exporter is a :class:`TracingError`.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

import grpc
import grpc.aio

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
except ImportError:  # pragma: no cover - the SDK-only venv test covers it
    _HAVE_OTEL = False
else:
    _HAVE_OTEL = True

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import Sampler

__all__ = [
    "EXPORTERS",
    "PROTOCOLS",
    "SAMPLERS",
    "Exporter",
    "Protocol",
    "SamplerName",
    "TraceContextInterceptor",
    "TracingError",
    "TracingOptions",
    "build_provider",
    "install_tracing",
    "options_from_env",
    "shutdown_tracing",
]

# One list of each, for the runtime's [tracing] section (pydantic) and the OTEL_* checks here.
Exporter = Literal["otlp", "console", "none"]
Protocol = Literal["grpc", "http/protobuf"]
SamplerName = Literal[
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
]
EXPORTERS: tuple[str, ...] = get_args(Exporter)
PROTOCOLS: tuple[str, ...] = get_args(Protocol)
SAMPLERS: tuple[str, ...] = get_args(SamplerName)


class TracingError(ValueError):
    """Tracing options that cannot be used (named, with the values allowed)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TracingOptions:
    """How a process exports spans. ``exporter="none"`` (the default) installs nothing.

    ``endpoint`` is the OTLP base address, like ``OTEL_EXPORTER_OTLP_ENDPOINT``: empty lets the
    exporter read its own ``OTEL_EXPORTER_OTLP_*`` variables (or use its default).
    """

    exporter: str = "none"
    protocol: str = "http/protobuf"
    endpoint: str = ""
    service_name: str = ""
    sampler: str = "parentbased_always_on"
    sampler_arg: float = 1.0

    def __post_init__(self) -> None:
        _check("exporter", self.exporter, EXPORTERS)
        _check("protocol", self.protocol, PROTOCOLS)
        _check("sampler", self.sampler, SAMPLERS)
        if not 0.0 <= self.sampler_arg <= 1.0:
            raise TracingError(f"sampler_arg must be a ratio in [0, 1], not {self.sampler_arg}")


def _check(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise TracingError(f"tracing {name} {value!r} is not one of {', '.join(allowed)}")


def options_from_env(
    env: Mapping[str, str] | None = None, *, base: TracingOptions | None = None
) -> TracingOptions:
    """``base`` (defaults when None) with the standard ``OTEL_*`` variables set in ``env`` on top.

    Read: OTEL_SDK_DISABLED, OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL (else
    OTEL_EXPORTER_OTLP_PROTOCOL), OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG;
    with OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set, the exporter reads
    its address itself (a configured ``endpoint`` is not passed, so it cannot override them).

    Raises:
        TracingError: a value not allowed (an unknown exporter, protocol or sampler, a bad ratio).
    """
    env = os.environ if env is None else env
    base = base or TracingOptions()
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return TracingOptions(service_name=base.service_name)
    exporter = base.exporter
    if raw := env.get("OTEL_TRACES_EXPORTER", "").strip().lower():
        chosen = [e.strip() for e in raw.split(",") if e.strip()]
        if len(chosen) != 1:
            raise TracingError(f"OTEL_TRACES_EXPORTER names one exporter here, not {raw!r}")
        exporter = chosen[0]
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or ""
    ).strip() or base.protocol
    sampler_arg = base.sampler_arg
    if raw_arg := env.get("OTEL_TRACES_SAMPLER_ARG", "").strip():
        try:
            sampler_arg = float(raw_arg)
        except ValueError:
            raise TracingError(f"OTEL_TRACES_SAMPLER_ARG must be a number, not {raw_arg!r}") from None
    return TracingOptions(
        exporter=exporter,
        protocol=protocol,
        # The exporters read OTEL_EXPORTER_OTLP_* themselves; only a configured endpoint is passed.
        endpoint=""
        if env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        else base.endpoint,
        service_name=env.get("OTEL_SERVICE_NAME", "").strip() or base.service_name,
        sampler=env.get("OTEL_TRACES_SAMPLER", "").strip().lower() or base.sampler,
        sampler_arg=sampler_arg,
    )


def _sampler(options: TracingOptions) -> Sampler:
    from opentelemetry.sdk.trace import sampling

    ratio = sampling.TraceIdRatioBased(options.sampler_arg)
    return {
        "always_on": sampling.ALWAYS_ON,
        "always_off": sampling.ALWAYS_OFF,
        "traceidratio": ratio,
        "parentbased_always_on": sampling.ParentBased(sampling.ALWAYS_ON),
        "parentbased_always_off": sampling.ParentBased(sampling.ALWAYS_OFF),
        "parentbased_traceidratio": sampling.ParentBased(ratio),
    }[options.sampler]


def install_tracing(options: TracingOptions, *, default_service_name: str) -> TracerProvider | None:
    """Install a global TracerProvider exporting as ``options`` say; None (nothing done) when off.

    Raises:
        TracingError: an exporter is asked for but the OpenTelemetry SDK or exporter is missing.
    """
    provider = build_provider(options, default_service_name=default_service_name)
    if provider is not None:
        trace.set_tracer_provider(provider)
    return provider


def build_provider(options: TracingOptions, *, default_service_name: str) -> TracerProvider | None:
    """The TracerProvider ``options`` describe, not installed; None when tracing is off.

    Raises:
        TracingError: an exporter is asked for but the OpenTelemetry SDK or exporter is missing.
    """
    if options.exporter == "none":
        return None
    try:
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

        exporter: SpanExporter
        if options.exporter == "console":
            # stderr: a process's stdout carries its one "listening on" line.
            exporter = ConsoleSpanExporter(out=sys.stderr)
        elif options.protocol == "grpc":
            from agentrt.toolhost._otlp_wire import WireSpanExporter

            exporter = WireSpanExporter(endpoint=options.endpoint or None)
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

            endpoint = options.endpoint and options.endpoint.rstrip("/") + "/v1/traces"
            exporter = Http(endpoint=endpoint or None)
    except ImportError as exc:
        raise TracingError(
            f"tracing exporter {options.exporter!r} needs the OpenTelemetry SDK and exporters "
            f"(pip install 'agentrt-toolhost[otel]'): {exc.name} is missing"
        ) from None
    resource = Resource.create({SERVICE_NAME: options.service_name or default_service_name})
    provider = TracerProvider(resource=resource, sampler=_sampler(options))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def shutdown_tracing(provider: TracerProvider | None, *, timeout_s: float = 5.0) -> None:
    """Export what is buffered and stop (on SIGTERM, before the process exits)."""
    if provider is None:
        return
    provider.force_flush(timeout_millis=round(timeout_s * 1000))
    provider.shutdown()


if TYPE_CHECKING:
    _Interceptor = grpc.aio.ServerInterceptor[Any, Any]
else:  # generic only in the stubs
    _Interceptor = grpc.aio.ServerInterceptor

Context = grpc.aio.ServicerContext[Any, Any]


class TraceContextInterceptor(_Interceptor):
    """A SERVER span per RPC, child of the caller's ``traceparent``, current while the handler runs.

    Put it first in the server's interceptors, so the span covers the authentication of the call
    and what the handler does. Health checks and reflection are not traced.
    """

    def __init__(
        self, *, tracer_name: str, skip_prefixes: tuple[str, ...] = (), tracer_provider: Any = None
    ) -> None:
        self._skip = ("/grpc.health.", "/grpc.reflection.", *skip_prefixes)
        self._name = tracer_name
        self._own = (
            trace.get_tracer(tracer_name, tracer_provider=tracer_provider)
            if tracer_provider is not None
            else None
        )
        # The global provider's own tracer, looked up once per provider (not a ProxyTracer: that
        # would add a delegation layer to every span).
        self._resolved: tuple[object, Any] | None = None

    def _tracer(self) -> Any:
        """The tracer of this call's span; None while no provider is installed."""
        if self._own is not None:
            return self._own
        provider = trace.get_tracer_provider()
        if self._resolved is not None and self._resolved[0] is provider:
            return self._resolved[1]
        if isinstance(provider, trace.ProxyTracerProvider):
            return None
        self._resolved = (provider, provider.get_tracer(self._name))
        return self._resolved[1]

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if not _HAVE_OTEL or handler is None or method.startswith(self._skip):
            return handler
        # Nothing can be recorded while no provider is installed: the call then makes no span, and
        # only the caller's context is made current (what the handler sends on still carries it).
        wrapped: grpc.RpcMethodHandler[Any, Any] = _wrap(handler, self._tracer(), method)
        return wrapped


def _wrap(handler: grpc.RpcMethodHandler[Any, Any], tracer: Any, method: str) -> Any:
    serializers = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(_unary(handler.unary_unary, tracer, method), **serializers)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            _streaming(handler.unary_stream, tracer, method), **serializers
        )
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(
            _unary(handler.stream_unary, tracer, method), **serializers
        )
    assert handler.stream_stream is not None
    return grpc.stream_stream_rpc_method_handler(
        _streaming(handler.stream_stream, tracer, method), **serializers
    )


def _carrier(context: Context) -> dict[str, str]:
    return {
        key.lower(): value
        for key, value in context.invocation_metadata() or ()
        if isinstance(value, str) and key.lower() in ("traceparent", "tracestate")
    }


def _extracted(context: Context) -> Any:
    """The caller's trace context (from its ``traceparent``), on an empty context."""
    return propagate.extract(_carrier(context), context=otel_context.Context())


class _Started:
    """What an RPC's handler runs under: its SERVER span made current, or (untraced) only the
    caller's context. One small class, not the SDK's nested context managers, per call."""

    __slots__ = ("_span", "_token")

    def __init__(self, tracer: Any, name: str, attributes: Mapping[str, str], context: Context) -> None:
        if tracer is None:
            self._span: Any = None
            self._token = otel_context.attach(_extracted(context))
            return
        self._span = tracer.start_span(
            name,
            context=_extracted(context),
            kind=trace.SpanKind.SERVER,
            attributes=attributes,
            # An abort is an RpcError raised through the span: its status is set by _status.
            record_exception=False,
            set_status_on_exception=False,
        )
        self._token = otel_context.attach(trace.set_span_in_context(self._span))

    def end(self, context: Context) -> None:
        otel_context.detach(self._token)
        if self._span is not None:
            _status(self._span, context)
            self._span.end()


def _names(method: str) -> tuple[str, dict[str, str]]:
    name = method.lstrip("/")
    service, _, rpc = name.partition("/")
    return name, {"rpc.system": "grpc", "rpc.service": service, "rpc.method": rpc}


# The codes a server span marks as its own error (RPC semantic conventions): the others say
# what the caller asked for was refused (INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED...).
_SERVER_ERRORS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)


def _status(span: Any, context: Context) -> None:
    code = context.code() if hasattr(context, "code") else None
    if isinstance(code, grpc.StatusCode):
        span.set_attribute("rpc.grpc.status_code", code.value[0])
        if code in _SERVER_ERRORS:
            span.set_status(trace.Status(trace.StatusCode.ERROR, code.name))
    else:
        span.set_attribute("rpc.grpc.status_code", 0)


def _unary(behavior: Callable[..., Any], tracer: Any, method: str) -> Callable[..., Any]:
    name, attributes = _names(method)

    async def wrapped(request: Any, context: Context) -> Any:
        started = _Started(tracer, name, attributes, context)
        try:
            return await behavior(request, context)
        finally:
            started.end(context)

    return wrapped


def _streaming(behavior: Callable[..., Any], tracer: Any, method: str) -> Callable[..., Any]:
    if not inspect.isasyncgenfunction(behavior):
        return _unary(behavior, tracer, method)

    name, attributes = _names(method)

    async def wrapped(request: Any, context: Context) -> AsyncIterator[Any]:
        started = _Started(tracer, name, attributes, context)
        try:
            async for response in behavior(request, context):
                yield response
        finally:
            started.end(context)

    return wrapped
