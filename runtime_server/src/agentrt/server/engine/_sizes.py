"""Sizes that bound what enters the log: events, model output, tool-call arguments."""

from __future__ import annotations

from agentrt.server.core import AgentRtError

# Tool-call arguments of one model response, together: they travel in model.completed and
# tool.started (and to the tool host, signed), so they stay inline and bounded.
MAX_ARGUMENTS_BYTES = 1024 * 1024
# No stored event may come near the 4 MiB gRPC response cap: past this one the commit is refused
# (a fault of the run) rather than a log written that no stream could ever send again.
MAX_EVENT_BYTES = 3 * 1024 * 1024


class EventTooLarge(AgentRtError):
    """An event would exceed MAX_EVENT_BYTES; nothing is committed (a bug: every large value has a path)."""

    reason = "EVENT_TOO_LARGE"


class ModelOutputTooLarge(AgentRtError):
    """A model response past its maximum (text over max_model_output_bytes, or arguments over 1 MiB)."""

    reason = "MODEL_OUTPUT_TOO_LARGE"


def check_event_sizes(payloads: list[tuple[str, str]]) -> None:
    """Refuse to commit an event whose JSON is past MAX_EVENT_BYTES.

    Raises:
        EventTooLarge: Naming the event type and its size, never its content.
    """
    for event_type, payload in payloads:
        if len(payload) * 4 > MAX_EVENT_BYTES and utf8_size(payload) > MAX_EVENT_BYTES:
            raise EventTooLarge(
                f"a {event_type} event of {utf8_size(payload)} bytes is past {MAX_EVENT_BYTES}",
                metadata={"event_type": event_type},
            )


def utf8_size(text: str) -> int:
    """Bytes of ``text`` in UTF-8, without encoding it when the answer is plain from its length."""
    if text.isascii():
        return len(text)
    return len(text.encode())
