"""Cheap, deterministic token estimates for when no tokenizer count is available."""

from __future__ import annotations

from collections.abc import Iterable

from ._types import Message

__all__ = ["estimate_message_tokens", "estimate_tokens"]


def estimate_tokens(text: str) -> int:
    """Estimate the tokens of ``text`` at about four characters per token; at least 1."""
    return len(text) // 4 + 1


def estimate_message_tokens(messages: Iterable[Message]) -> int:
    """Estimate the prompt tokens of ``messages``: their contents and tool call arguments."""
    size = 0
    for message in messages:
        size += len(message.content)
        for call in message.tool_calls:
            size += len(call.tool) + len(call.arguments_json)
    return size // 4 + 1
