"""A test tool that makes a span of its own with the plain OpenTelemetry API, for trace suites.

- ``traced.echo`` (READ_ONLY, idempotent, async): opens the span ``traced.echo work`` (attribute
  ``traced.text``) and answers ``{"echo": text, "trace_id": ..., "span_id": ...}``: the ids of
  the span current when the tool ran (all zeros when untraced). A plugin does nothing to join
  the run's trace: its host makes the call's span current before the tool runs.

Load with ``agentrt-toolhost --plugin agentrt.plugins.traced_tools``; not an entry point. Needs
``opentelemetry-api`` (the tool SDK's ``otel`` extra); without it the tool answers untraced.
"""

from __future__ import annotations

from typing import Any

import pydantic

from agentrt.toolhost import SideEffect, Tool, ToolContext, ToolHostConfig, hookimpl, tool

try:
    from opentelemetry import trace
except ImportError:  # pragma: no cover - the SDK-only venv has no OpenTelemetry
    trace = None  # type: ignore[assignment]

__all__ = ["EchoArgs", "agentrt_register_tools", "traced_echo"]


class EchoArgs(pydantic.BaseModel):
    """Arguments of traced.echo."""

    model_config = pydantic.ConfigDict(extra="forbid")
    text: str = pydantic.Field("", max_length=200)


@tool(
    name="traced.echo",
    description="Echo the text back, inside a span of the tool's own.",
    side_effect=SideEffect.READ_ONLY,
    idempotent=True,
    timeout=5.0,
)
async def traced_echo(args: EchoArgs, ctx: ToolContext) -> dict[str, Any]:
    """Open a span under the current one (the host's call span), then answer with its ids."""
    if trace is None:
        return {"echo": args.text, "trace_id": "0" * 32, "span_id": "0" * 16}
    tracer = trace.get_tracer("agentrt.plugins.traced_tools")
    with tracer.start_as_current_span("traced.echo work", attributes={"traced.text": args.text}) as span:
        context = span.get_span_context()
        return {
            "echo": args.text,
            "trace_id": format(context.trace_id, "032x"),
            "span_id": format(context.span_id, "016x"),
        }


@hookimpl
def agentrt_register_tools(config: ToolHostConfig) -> list[Tool]:
    """The traced tool."""
    return [traced_echo]
