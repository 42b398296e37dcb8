"""Telemetry: process counters, and OpenTelemetry tracing of runs (``_tracing``)."""

from __future__ import annotations

from agentrt.server.telemetry._counters import COUNTER_NAMES, Counters
from agentrt.server.telemetry._tracing import (
    CAPTURE_CONTENT_ENV,
    current_traceparent,
    run_span,
    setup_tracing,
    shutdown_tracing,
    span_event,
    step_span,
    trace_id_of,
    traced_chat,
    traced_tool,
    tracing_options,
)

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "COUNTER_NAMES",
    "Counters",
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
