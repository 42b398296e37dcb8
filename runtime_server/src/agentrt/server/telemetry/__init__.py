"""Telemetry: the engine's counters and histograms, and the process's OpenTelemetry metrics."""

from __future__ import annotations

from agentrt.server.telemetry._counters import (
    COUNTER_NAMES,
    HISTOGRAMS,
    OTHER,
    OTHER_CAP,
    Counters,
    tool_labels,
)
from agentrt.server.telemetry._metrics import GAUGES, GaugeCounts, RuntimeMetrics

__all__ = [
    "COUNTER_NAMES",
    "GAUGES",
    "HISTOGRAMS",
    "OTHER",
    "OTHER_CAP",
    "Counters",
    "GaugeCounts",
    "RuntimeMetrics",
    "tool_labels",
]
