"""The engine's counters and histograms (R10.3), backed by OpenTelemetry instruments.

``Counters`` is the engine's ``ports.counters``. Each ``inc`` adds to the process total (tests
read ``get``/``snapshot`` in process) and, with a meter, to the OTel counter
``agentrt.<name>`` (Prometheus: ``agentrt_<name>_total``) with bounded attributes:

- ``tenant`` and ``agent``: bound once per run task by ``bind_run`` (a context variable);
- ``tool``, ``provider``, ``model``, ``error_class``: given at the call site.

Never a run, call or request id. Each attribute keeps at most a fixed number of distinct values
(tenants and tools: ``[metrics] max_tenants``/``max_tools``; the others ``OTHER_CAP``); values
first seen after that are recorded as ``"other"``, so a tenant flood cannot grow the series.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter

__all__ = ["COUNTER_NAMES", "HISTOGRAMS", "OTHER", "OTHER_CAP", "Counters", "HistogramSpec", "tool_labels"]

COUNTER_NAMES: tuple[str, ...] = (
    "runs_started",
    "runs_ended",
    "steps",
    "retry_count",
    "retry_exhausted_count",
    "timeout_count",  # tool and model attempts whose own time ran out
    "cancel_requested_count",
    "unknown_result_count",
    "cleanup_failed_count",
    "duplicate_suppressed_count",
    "partial_run_count",
    "lease_lost_count",
    "run_fault_count",  # run.fault events written: exceptions contained while driving a run
    "environmental_fault_count",  # database, network or OS failures retried without a run.fault
    "recheck_veto_count",  # approved calls a re-check vetoed before they ran
    "variables_refused_count",  # tool results whose run variables were refused (too many, secret-like)
    "escalated_count",  # run.escalated events written: waits that need a person
    "cleanup_refused_count",  # cleanup registrations refused (malformed, untrusted tool)
    "cleanup_recovered_count",  # given-up cleanups the cleanup job released later
    "unknown_handed_over_count",  # cancelled runs ended with a write nobody can tell, for a person
    # A tool host's tools listed again (it reconnected, or its listing changed) or a failed
    # ListTools; attributes ``host`` and ``outcome`` (changed, unchanged, failed).
    "tool_host_relist_count",
    "redis_fallback",  # the Redis fan-out went down: replicas fell back to store polling
    "redis_dropped",  # fan-out messages dropped because too many waited to go out
    # Calls a draining pool member refused untaken, sent again at once to another member (``host``).
    "tool_drain_resend_count",
)

OTHER = "other"
OTHER_CAP = 100  # distinct agents, providers, models, error classes, outcomes, step kinds
_MAX_VALUE_CHARS = 64

# The attributes a call site may give; inside a run, tenant and agent come from bind_run.
_SITE_ATTRIBUTES = frozenset(
    {"tenant", "agent", "tool", "provider", "model", "error_class", "outcome", "kind", "token_type", "host"}
)


@dataclass(frozen=True, slots=True)
class HistogramSpec:
    name: str
    unit: str
    description: str
    buckets: tuple[float, ...]
    # Our attribute name -> the instrument's (GenAI semantic conventions for gen_ai.*).
    rename: Mapping[str, str]


_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# Bucket boundaries the GenAI semantic conventions advise for these two.
_GENAI_SECONDS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
_GENAI_TOKENS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
_GENAI = {
    "provider": "gen_ai.provider.name",
    "model": "gen_ai.request.model",
    "error_class": "error.type",
    "token_type": "gen_ai.token.type",
}

HISTOGRAMS: Mapping[str, HistogramSpec] = {
    "model_duration": HistogramSpec(
        "gen_ai.client.operation.duration", "s", "GenAI operation duration", _GENAI_SECONDS, _GENAI
    ),
    "model_tokens": HistogramSpec(
        "gen_ai.client.token.usage",
        "{token}",
        "Number of input and output tokens used",
        _GENAI_TOKENS,
        _GENAI,
    ),
    "tool_duration": HistogramSpec(
        "agentrt.tool.call.duration", "s", "One tool call attempt, by tool and outcome", _SECONDS, {}
    ),
    "commit_duration": HistogramSpec(
        "agentrt.commit.duration", "s", "One fenced commit of a run's events and row", _SECONDS, {}
    ),
    "step_duration": HistogramSpec(
        "agentrt.step.duration", "s", "One model or tool step, retries included", _SECONDS, {}
    ),
    "queue_wait": HistogramSpec(
        "agentrt.run.queue_wait.duration", "s", "From a run's creation to a worker taking it", _SECONDS, {}
    ),
}

_run_attributes: contextvars.ContextVar[tuple[tuple[str, str], ...]] = contextvars.ContextVar(
    "agentrt_metric_run_attributes", default=()
)


class _Capped:
    """The first ``cap`` distinct values of one attribute; any later one reads as ``other``."""

    def __init__(self, cap: int):
        self.cap = cap
        self.seen: set[str] = set()

    def __call__(self, value: str) -> str:
        value = value[:_MAX_VALUE_CHARS]
        if value in self.seen:
            return value
        if len(self.seen) >= self.cap:
            return OTHER
        self.seen.add(value)
        return value


def tool_labels(call: Any, outcome: Any) -> dict[str, str]:
    """``tool`` and ``outcome`` of one tool attempt: ok, timeout, or the error's code (lowercase)."""
    if outcome.error is None:
        kind = "ok"
    elif outcome.timed_out:
        kind = "timeout"
    else:
        code = outcome.error.code
        kind = str(getattr(code, "value", code)).lower()
    return {"tool": call.tool, "outcome": kind}


class Counters:
    """Monotonic counters and latency histograms of one runtime process.

    Args:
        meter: Where the OTel instruments live; None keeps the in-process totals only.
        max_tenants: Distinct ``tenant`` values kept; later ones are ``other``.
        max_tools: Distinct ``tool`` values kept; later ones are ``other``.
    """

    def __init__(self, meter: Meter | None = None, *, max_tenants: int = 100, max_tools: int = 200) -> None:
        self._values: Counter[str] = Counter({name: 0 for name in COUNTER_NAMES})
        self._caps = {"tenant": _Capped(max_tenants), "tool": _Capped(max_tools)}
        self._instruments: dict[str, Any] = {}
        self._histograms: dict[str, Any] = {}
        if meter is not None:
            for name in COUNTER_NAMES:
                self._instruments[name] = meter.create_counter(f"agentrt.{name}", unit="1")
                # A series from the first scrape on: rate() and alerts see 0, not "no data".
                self._instruments[name].add(0)
            for key, spec in HISTOGRAMS.items():
                self._histograms[key] = meter.create_histogram(
                    spec.name,
                    unit=spec.unit,
                    description=spec.description,
                    explicit_bucket_boundaries_advisory=list(spec.buckets),
                )

    def bind_run(self, *, tenant: str, agent: str) -> None:
        """Every count and latency of the current task from now on carries this tenant and agent."""
        _run_attributes.set((("tenant", self._cap("tenant", tenant)), ("agent", self._cap("agent", agent))))

    def inc(self, name: str, amount: int = 1, /, **attributes: str) -> None:
        """Add ``amount`` to counter ``name``.

        Raises:
            KeyError: an unknown counter or attribute (a programming error).
        """
        if name not in self._values:
            raise KeyError(f"unknown counter {name!r}")
        self._values[name] += amount
        instrument = self._instruments.get(name)
        if instrument is not None:
            instrument.add(amount, self._attributes(attributes))

    def observe(self, name: str, value: float, /, **attributes: str) -> None:
        """Record one value of histogram ``name`` (a key of ``HISTOGRAMS``).

        Raises:
            KeyError: an unknown histogram or attribute.
        """
        spec = HISTOGRAMS[name]
        histogram = self._histograms.get(name)
        if histogram is None:
            return
        attrs = self._attributes(attributes)
        if spec.rename:
            attrs = {spec.rename.get(k, k): v for k, v in attrs.items()}
        if name.startswith("model_"):
            attrs["gen_ai.operation.name"] = "chat"
        histogram.record(max(0.0, value), attrs)

    def model_call(self, provider: str, model: str, latency_s: float, usage: Any) -> None:
        """One answered model call: its duration and its input and output tokens (GenAI semconv)."""
        names = {"provider": provider, "model": model}
        self.observe("model_duration", latency_s, **names)
        self.observe("model_tokens", usage.input_tokens, token_type="input", **names)
        self.observe("model_tokens", usage.output_tokens, token_type="output", **names)

    @contextlib.contextmanager
    def step(self, kind: str) -> Iterator[None]:
        """Count a step and time it (``kind``: model or tool)."""
        self.inc("steps", kind=kind)
        began = time.monotonic()
        try:
            yield
        finally:
            self.observe("step_duration", time.monotonic() - began, kind=kind)

    def get(self, name: str) -> int:
        return self._values[name]

    def snapshot(self) -> dict[str, int]:
        return dict(self._values)

    def _cap(self, key: str, value: str) -> str:
        capped = self._caps.get(key)
        if capped is None:
            capped = self._caps[key] = _Capped(OTHER_CAP)
        return capped(value)

    def _attributes(self, given: Mapping[str, str]) -> dict[str, str]:
        attrs = dict(_run_attributes.get())
        for key, value in given.items():
            if key not in _SITE_ATTRIBUTES:
                raise KeyError(f"unknown metric attribute {key!r}")
            attrs[key] = self._cap(key, value or "")
        return attrs
