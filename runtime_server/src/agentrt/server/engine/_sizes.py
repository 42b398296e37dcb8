"""Sizes that bound what enters the log: events, model output, tool-call arguments."""

from __future__ import annotations

from agentrt.server.core import AgentRtError
from agentrt.server.store import MAX_EVENT_BYTES, EventTooLarge, utf8_size

__all__ = ["MAX_ARGUMENTS_BYTES", "MAX_EVENT_BYTES", "EventTooLarge", "ModelOutputTooLarge", "utf8_size"]

# Tool-call arguments of one model response, together: they travel in model.completed and
# tool.started (and to the tool host, signed), so they stay inline and bounded.
MAX_ARGUMENTS_BYTES = 1024 * 1024


class ModelOutputTooLarge(AgentRtError):
    """A model response past its maximum (text over max_model_output_bytes, or arguments over 1 MiB)."""

    reason = "MODEL_OUTPUT_TOO_LARGE"
