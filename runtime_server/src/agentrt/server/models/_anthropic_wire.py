"""Pure mapping between agentrt model values and the Anthropic Messages API JSON.

No I/O here: ``_anthropic.py`` sends what :func:`build_messages_request` builds, and turns answers
into values or errors with :func:`parse_messages_response` and :func:`error_from_response`
(``_anthropic_stream`` assembles streamed answers). Our OpenAI-like history maps as::

    system messages           -> top-level "system" (joined by blank lines)
    assistant + tool calls    -> assistant message: text block, then "tool_use" blocks (input objects)
    tool results              -> one user message of "tool_result" blocks per run of consecutive results
                                 (a user message right after them joins it as a text block)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from agentrt.server.core import JsonBoundsError, loads_bounded

from ._errors import ModelAuthError, ModelError, ModelPermanentError, ModelTransientError
from ._openai_wire import (
    from_wire_tool_name,
    parse_retry_after,
    redact,
    to_wire_tool_name,
    wire_loads,
    wire_tool_names,
)
from ._tokens import estimate_message_tokens, estimate_tokens
from ._types import Message, ModelRequest, ModelResponse, ModelToolCall

__all__ = [
    "build_messages_request",
    "error_from_event",
    "error_from_response",
    "finish_reason",
    "input_tokens",
    "parse_messages_response",
]

_MAX_DETAIL = 500
# Anthropic's stop reasons in OpenAI's vocabulary, which ModelResponse.finish_reason speaks.
_FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}
# The HTTP status each error type comes with, for error events inside a 200 stream.
_STATUS_OF_TYPE = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


def _bad_response(detail: str) -> ModelPermanentError:
    return ModelPermanentError(
        f"unexpected response from the model endpoint: {detail}", reason="bad_response"
    )


def _tool_input(call: ModelToolCall) -> dict[str, Any]:
    if not call.arguments_json.strip():
        return {}  # OpenAI-style histories may hold "" for a call without arguments
    try:
        value = loads_bounded(call.arguments_json)
    except JsonBoundsError as exc:
        if exc.reason != "invalid":
            return {}  # refused as INVALID_INPUT before it ran; the model was told so
        value = None
    if not isinstance(value, dict):
        raise ModelPermanentError(
            f"arguments of tool call {call.call_id!r} are not a JSON object; Anthropic needs one",
            reason="bad_request",
        )
    return value


def _assistant(message: Message) -> dict[str, Any]:
    if not message.tool_calls:
        return {"role": "assistant", "content": message.content}
    blocks: list[dict[str, Any]] = []
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    blocks.extend(
        {
            "type": "tool_use",
            "id": call.call_id,
            "name": to_wire_tool_name(call.tool),
            "input": _tool_input(call),
        }
        for call in message.tool_calls
    )
    return {"role": "assistant", "content": blocks}


def _open_tool_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The blocks of the last message when it is a user message of tool results, else None."""
    if not messages or messages[-1]["role"] != "user":
        return None
    content = messages[-1]["content"]
    if isinstance(content, list) and content and content[0].get("type") == "tool_result":
        return content
    return None


def _messages(history: tuple[Message, ...]) -> tuple[list[str], list[dict[str, Any]]]:
    system: list[str] = []
    messages: list[dict[str, Any]] = []
    for message in history:
        match message.role:
            case "system":
                if message.content:
                    system.append(message.content)
            case "user":
                blocks = _open_tool_results(messages)
                if blocks is not None:
                    if message.content:  # the API rejects empty text blocks
                        blocks.append({"type": "text", "text": message.content})
                else:
                    messages.append({"role": "user", "content": message.content})
            case "assistant":
                messages.append(_assistant(message))
            case "tool":
                if not message.tool_call_id:
                    raise ModelPermanentError("a tool message needs a tool_call_id", reason="bad_request")
                result = {
                    "type": "tool_result",
                    "tool_use_id": message.tool_call_id,
                    "content": message.content,
                }
                blocks = _open_tool_results(messages)
                if blocks is not None:
                    blocks.append(result)
                else:
                    messages.append({"role": "user", "content": [result]})
            case _:
                raise ModelPermanentError(f"unknown message role {message.role!r}", reason="bad_request")
    return system, messages


def build_messages_request(
    request: ModelRequest, *, max_tokens: int, temperature: float | None = None, stream: bool = False
) -> tuple[dict[str, Any], dict[str, str]]:
    """Build the JSON body of ``POST /v1/messages`` for ``request``.

    Args:
        request: The model call.
        max_tokens: Output token limit (the API requires one).
        temperature: Sampling temperature, sent only when set.
        stream: Ask for an event stream.

    Returns:
        The body, and the map from wire tool names back to tool names.

    Raises:
        ModelPermanentError: A tool name the API cannot take (``invalid_tool_name``), or a history
            it cannot express (``bad_request``).
    """
    names = wire_tool_names(request.tools, api="Anthropic")
    system, messages = _messages(request.messages)
    body: dict[str, Any] = {"model": request.spec.name, "max_tokens": max_tokens}
    if system:
        body["system"] = "\n\n".join(system)
    body["messages"] = messages
    if request.tools:
        body["tools"] = [
            {
                "name": to_wire_tool_name(tool.name),
                "description": tool.description,
                "input_schema": tool.input_schema,
            }
            for tool in request.tools
        ]
    if temperature is not None:
        body["temperature"] = temperature
    if stream:
        body["stream"] = True
    return body, names


def _count(usage: Mapping[str, Any], field: str) -> int | None:
    value = usage.get(field)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def input_tokens(usage: Mapping[str, Any]) -> int | None:
    """All prompt tokens of a ``usage`` object: uncached, written to and read from the cache."""
    counts = [
        _count(usage, field)
        for field in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    ]
    if counts[0] is None:
        return None
    return sum(count or 0 for count in counts)


def finish_reason(stop_reason: object, *, has_calls: bool) -> str:
    """Map an Anthropic ``stop_reason`` to OpenAI's vocabulary (unknown ones pass through)."""
    if isinstance(stop_reason, str) and stop_reason:
        return _FINISH_REASONS.get(stop_reason, stop_reason)
    return "tool_calls" if has_calls else "stop"


def parse_messages_response(
    body: Any, *, request: ModelRequest, tool_names: Mapping[str, str] | None = None
) -> ModelResponse:
    """Turn a Messages API answer into a :class:`ModelResponse`.

    Args:
        body: The decoded JSON of a 2xx answer.
        request: The request it answers (for token estimates).
        tool_names: Wire tool name -> tool name, from :func:`build_messages_request`.

    Returns:
        The decision; blocks other than ``text`` and ``tool_use`` (thinking, ...) are left out.

    Raises:
        ModelPermanentError: The answer does not have the Messages shape (``bad_response``).
    """
    names = tool_names or {}
    if not isinstance(body, dict) or not isinstance(body.get("content"), list):
        raise _bad_response("no content list")
    text: list[str] = []
    calls: list[ModelToolCall] = []
    for index, block in enumerate(body["content"]):
        if not isinstance(block, dict):
            raise _bad_response(f"content[{index}] is not an object")
        if block.get("type") == "text":
            if not isinstance(block.get("text"), str):
                raise _bad_response(f"content[{index}].text is not a string")
            text.append(block["text"])
        elif block.get("type") == "tool_use":
            call_id, name, arguments = block.get("id"), block.get("name"), block.get("input", {})
            if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(arguments, dict):
                raise _bad_response(f"content[{index}] is not a tool_use block with id, name and input")
            calls.append(
                ModelToolCall(
                    call_id=call_id,
                    tool=names.get(name) or from_wire_tool_name(name),
                    arguments_json=json.dumps(arguments, separators=(",", ":"), ensure_ascii=False),
                )
            )
    content = "".join(text)
    usage = body.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    prompt = input_tokens(usage)
    output = _count(usage, "output_tokens")
    return ModelResponse(
        text=content,
        tool_calls=tuple(calls),
        input_tokens=estimate_message_tokens(request.messages) if prompt is None else prompt,
        output_tokens=output
        if output is not None
        else estimate_tokens(content + "".join(call.tool + call.arguments_json for call in calls)),
        finish_reason=finish_reason(body.get("stop_reason"), has_calls=bool(calls)),
        response_id=body["id"] if isinstance(body.get("id"), str) else "",
    )


def _error_detail(body: bytes) -> tuple[str, str]:
    """Return (type, message) from ``{"type": "error", "error": {...}}`` or a plain-text body."""
    try:
        decoded = wire_loads(body)
    except ValueError:
        return "", body.decode("utf-8", "replace").strip()[:_MAX_DETAIL]
    error = decoded.get("error") if isinstance(decoded, dict) else None
    if isinstance(error, dict):
        return str(error.get("type") or ""), str(error.get("message") or "")[:_MAX_DETAIL]
    return "", json.dumps(decoded)[:_MAX_DETAIL]


def _error(
    status: int,
    error_type: str,
    message: str,
    retry_after_s: float | None,
    status_code: int | None,
) -> ModelError:
    if status in (401, 403):
        reason = "unauthorized" if status == 401 else "forbidden"
        return ModelAuthError(message, reason=reason, status_code=status_code)
    if status == 429:
        return ModelTransientError(
            message, reason="rate_limited", retry_after_s=retry_after_s, status_code=status_code
        )
    if status == 529 or error_type == "overloaded_error":
        return ModelTransientError(
            message, reason="overloaded", retry_after_s=retry_after_s, status_code=status_code
        )
    if status >= 500 or status in (408, 409):
        reason = {408: "timeout", 409: "conflict", 504: "timeout"}.get(status, "server_error")
        return ModelTransientError(
            message, reason=reason, retry_after_s=retry_after_s, status_code=status_code
        )
    if status == 402 or error_type == "billing_error":
        return ModelPermanentError(message, reason="insufficient_quota", status_code=status_code)
    reason = {400: "bad_request", 404: "not_found", 413: "request_too_large", 422: "bad_request"}.get(
        status, "http_error"
    )
    return ModelPermanentError(message, reason=reason, status_code=status_code)


def error_from_response(
    status_code: int,
    headers: Mapping[str, str],
    body: bytes,
    *,
    secret: str = "",
    now: datetime | None = None,
) -> ModelError:
    """Map a non-2xx answer to the matching :class:`ModelError`.

    Args:
        status_code: HTTP status.
        headers: Response headers (``retry-after`` and ``retry-after-ms`` are honoured).
        body: Response body.
        secret: The API key, removed from the message should the server echo it.
        now: Current time, for HTTP-date ``retry-after`` values.

    Returns:
        Transient for 408, 409, 429, 5xx and 529 (``overloaded``); auth for 401/403; permanent
        otherwise. Only the status and the error's ``type`` decide, never its message: the API
        gives a prompt that is too long no type of its own, so it is ``bad_request``.
    """
    error_type, detail = _error_detail(body)
    message = f"model endpoint returned HTTP {status_code}" + (f": {detail}" if detail else "")
    retry_after_s = parse_retry_after(headers, now=now)
    return _error(status_code, error_type, redact(message, secret), retry_after_s, status_code)


def error_from_event(data: str, *, secret: str = "") -> ModelError:
    """Map the ``error`` event of a stream (``{"type": "error", "error": {"type": ...}}``).

    Args:
        data: The event's data.
        secret: The API key, removed from the message.

    Returns:
        The error the same error type gets as an HTTP answer, without a status code;
        ``overloaded_error`` is transient ``overloaded``.
    """
    error_type, detail = _error_detail(data.encode())
    status = _STATUS_OF_TYPE.get(error_type, 500)
    message = f"model stream reported {error_type or 'an error'}" + (f": {detail}" if detail else "")
    return _error(status, error_type, redact(message, secret), None, None)
