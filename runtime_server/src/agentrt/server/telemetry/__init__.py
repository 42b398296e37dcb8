"""Telemetry: the engine's counters and histograms, the process's OpenTelemetry metrics
(``_metrics``), structured logs (``_logging``) and tracing of runs (``_tracing``)."""

from __future__ import annotations

from agentrt.server.telemetry._counters import (
    COUNTER_NAMES,
    HISTOGRAMS,
    OTHER,
    OTHER_CAP,
    Counters,
    tool_labels,
)
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
from agentrt.server.telemetry._metrics import GAUGES, GaugeCounts, RuntimeMetrics
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
    "GAUGES",
    "HISTOGRAMS",
    "OTHER",
    "OTHER_CAP",
    "Counters",
    "GaugeCounts",
    "RunStory",
    "RuntimeMetrics",
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
    "tool_labels",
    "trace_id_of",
    "traced_chat",
    "traced_tool",
    "tracing_options",
    "transition",
]
