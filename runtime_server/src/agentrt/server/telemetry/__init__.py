"""Telemetry: process counters, structured logs (``_logging``), tracing of runs (``_tracing``)."""

from __future__ import annotations

from agentrt.server.telemetry._counters import COUNTER_NAMES, Counters
from agentrt.server.telemetry._logging import (
    FORMAT_ENV,
    RunStory,
    active_format,
    decision,
    log_failure,
    logs_call,
    resolve_format,
    run_log,
    setup_logging,
    transition,
)
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
    "FORMAT_ENV",
    "Counters",
    "RunStory",
    "active_format",
    "current_traceparent",
    "decision",
    "log_failure",
    "logs_call",
    "resolve_format",
    "run_log",
    "run_span",
    "setup_logging",
    "setup_tracing",
    "shutdown_tracing",
    "span_event",
    "step_span",
    "trace_id_of",
    "traced_chat",
    "traced_tool",
    "tracing_options",
    "transition",
]
