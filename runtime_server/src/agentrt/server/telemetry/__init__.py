"""Telemetry: process counters and structured logs (OpenTelemetry export comes with issue 17)."""

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

__all__ = [
    "COUNTER_NAMES",
    "FORMAT_ENV",
    "Counters",
    "RunStory",
    "active_format",
    "decision",
    "log_failure",
    "logs_call",
    "resolve_format",
    "run_log",
    "setup_logging",
    "transition",
]
