"""The ``[tracing]`` section: OpenTelemetry spans of runs, off by default.

The standard ``OTEL_*`` variables set in the environment win over this section (as ``AGENTRT_*``
ones win over the file): see ``agentrt.server.telemetry.tracing_options``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agentrt.toolhost.tracing import Exporter, Protocol, SamplerName


class TracingConfig(BaseModel):
    """Where spans go and what they may carry (README, Tracing)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # "none" (the default) installs no SDK: spans are the API's no-ops, traceparent still passes on.
    exporter: Exporter = "none"
    protocol: Protocol = "http/protobuf"
    endpoint: str = ""  # the OTLP base address; empty: the exporter's default
    service_name: str = "agentrt-runtime"
    sampler: SamplerName = "parentbased_always_on"
    sampler_arg: float = Field(1.0, ge=0.0, le=1.0)
    # Messages and tool arguments on spans (gen_ai.input.messages...), redacted. Only with
    # OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true too: both must opt in.
    capture_content: bool = False
