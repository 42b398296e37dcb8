"""Pure mapping between agentrt model values and the OpenAI Chat Completions JSON.

No I/O here: the provider in ``_openai.py`` sends what :func:`build_chat_request` builds and turns
answers into values or errors with :func:`parse_chat_response` and :func:`error_from_response`.
"""

from __future__ import annotations

import email.utils
import json
import math
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from agentrt.server.core import JsonLimits, loads_bounded

from ._errors import ModelAuthError, ModelError, ModelPermanentError, ModelTransientError
from ._tokens import estimate_message_tokens, estimate_tokens
from ._types import Message, ModelRequest, ModelResponse, ModelToolCall, ToolDef

__all__ = [
    "build_chat_request",
    "error_from_response",
    "from_wire_tool_name",
    "message_to_wire",
    "parse_chat_response",
    "parse_retry_after",
    "redact",
    "to_wire_tool_name",
    "wire_tool_names",
]

# OpenAI accepts function names matching this; dots, used by our tool names, are not allowed.
_WIRE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# Key-shaped tokens (OpenAI "sk-...", also the partly masked ones its 401 messages echo).
_KEY_LIKE = re.compile(r"\bsk-[A-Za-z0-9_\-*]{4,}")
_MAX_DETAIL = 500
# 529 is what Anthropic, and some OpenAI-compatible gateways, answer when overloaded.
_TRANSIENT_REASONS = {408: "timeout", 409: "conflict", 529: "overloaded"}


def to_wire_tool_name(name: str) -> str:
    """Map a tool name to an OpenAI function name: ``.`` becomes ``__``."""
    return name.replace(".", "__")


def from_wire_tool_name(wire_name: str) -> str:
    """Map an OpenAI function name back to a tool name: ``__`` becomes ``.``."""
    return wire_name.replace("__", ".")


def redact(text: str, secret: str = "") -> str:
    """Remove ``secret`` and anything shaped like an OpenAI key from ``text``."""
    if len(secret) >= 4:
        text = text.replace(secret, "***")
    return _KEY_LIKE.sub("sk-***", text)


def _tool_call_to_wire(call: ModelToolCall) -> dict[str, Any]:
    return {
        "id": call.call_id,
        "type": "function",
        "function": {"name": to_wire_tool_name(call.tool), "arguments": call.arguments_json},
    }


def message_to_wire(message: Message) -> dict[str, Any]:
    """Convert one history message to its Chat Completions form.

    Args:
        message: The message.

    Returns:
        The JSON object for the ``messages`` array.

    Raises:
        ModelPermanentError: A ``tool`` message without ``tool_call_id``, or an unknown role.
    """
    match message.role:
        case "system" | "user":
            return {"role": message.role, "content": message.content}
        case "assistant":
            if not message.tool_calls:
                return {"role": "assistant", "content": message.content}
            # The API wants null content next to tool calls, and rejects an empty tool_calls array.
            return {
                "role": "assistant",
                "content": message.content or None,
                "tool_calls": [_tool_call_to_wire(call) for call in message.tool_calls],
            }
        case "tool":
            if not message.tool_call_id:
                raise ModelPermanentError("a tool message needs a tool_call_id", reason="bad_request")
            return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
        case _:
            raise ModelPermanentError(f"unknown message role {message.role!r}", reason="bad_request")


def wire_tool_names(tools: Iterable[ToolDef], *, api: str) -> dict[str, str]:
    """Map tool names to wire names (``[A-Za-z0-9_-]{1,64}``, which OpenAI and Anthropic share).

    Args:
        tools: The tools of a request.
        api: API name for error messages.

    Returns:
        Wire name -> tool name, in the order of ``tools``.

    Raises:
        ModelPermanentError: ``invalid_tool_name``: a name the API cannot take, or two tools with the
            same wire name.
    """
    names: dict[str, str] = {}
    for tool in tools:
        wire = to_wire_tool_name(tool.name)
        if not _WIRE_NAME.match(wire):
            raise ModelPermanentError(
                f"tool name {tool.name!r} cannot be sent to {api} (letters, digits, '_', '-', '.'; "
                "at most 64 characters)",
                reason="invalid_tool_name",
            )
        if names.setdefault(wire, tool.name) != tool.name:
            raise ModelPermanentError(
                f"tools {names[wire]!r} and {tool.name!r} both map to the function name {wire!r}",
                reason="invalid_tool_name",
            )
    return names


def build_chat_request(
    request: ModelRequest, *, temperature: float | None = None, max_tokens: int | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """Build the JSON body of ``POST /chat/completions`` for ``request``.

    Args:
        request: The model call.
        temperature: Sampling temperature, sent only when set.
        max_tokens: Completion token limit, sent only when set.

    Returns:
        The body, and the map from wire function names back to tool names.

    Raises:
        ModelPermanentError: A tool name OpenAI cannot accept, or two tools with the same wire name.
    """
    names = wire_tool_names(request.tools, api="OpenAI")
    tools = [
        {
            "type": "function",
            "function": {
                "name": to_wire_tool_name(tool.name),
                "description": tool.description,
                "parameters": tool.input_schema,
            },
        }
        for tool in request.tools
    ]
    body: dict[str, Any] = {
        "model": request.spec.name,
        "messages": [message_to_wire(message) for message in request.messages],
    }
    if tools:
        body["tools"] = tools
        body["tool_choice"] = "auto"
    if temperature is not None:
        body["temperature"] = temperature
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body, names


def _bad_response(detail: str) -> ModelPermanentError:
    return ModelPermanentError(
        f"unexpected response from the model endpoint: {detail}", reason="bad_response"
    )


def _count(usage: Mapping[str, Any], field: str) -> int | None:
    value = usage.get(field)
    # bool is an int; a server sending true/false here is broken, not counting.
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def parse_chat_response(
    body: Any, *, request: ModelRequest, tool_names: Mapping[str, str] | None = None
) -> ModelResponse:
    """Turn a Chat Completions answer into a :class:`ModelResponse`.

    Args:
        body: The decoded JSON of a 2xx answer.
        request: The request it answers (for fallback call ids and token estimates).
        tool_names: Wire function name -> tool name, from :func:`build_chat_request`; names not in it
            are mapped back with :func:`from_wire_tool_name`.

    Returns:
        The decision. Token counts fall back to estimates when the server sends no ``usage``.

    Raises:
        ModelPermanentError: The answer does not have the Chat Completions shape (``bad_response``).
    """
    names = tool_names or {}
    if not isinstance(body, dict):
        raise _bad_response("the body is not a JSON object")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _bad_response("no choices")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise _bad_response("choices[0].message is missing")
    content = message.get("content")
    if content is None:
        # A refusal is the model's answer to show, when it gives one instead of content.
        refusal = message.get("refusal")
        content = refusal if isinstance(refusal, str) else ""
    if not isinstance(content, str):
        raise _bad_response("choices[0].message.content is not a string")
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise _bad_response("choices[0].message.tool_calls is not a list")
    calls: list[ModelToolCall] = []
    for index, raw in enumerate(raw_calls):
        where = f"choices[0].message.tool_calls[{index}]"
        if not isinstance(raw, dict) or raw.get("type", "function") != "function":
            raise _bad_response(f"{where} is not a function call")
        function = raw.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise _bad_response(f"{where}.function.name is missing")
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            # Some compatible servers send the object itself instead of JSON text.
            arguments = json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)
        call_id = raw.get("id")
        if not isinstance(call_id, str) or not call_id:
            call_id = f"call_{request.step}_{index}"
        wire_name: str = function["name"]
        calls.append(
            ModelToolCall(
                call_id=call_id,
                tool=names.get(wire_name) or from_wire_tool_name(wire_name),
                arguments_json=arguments,
            )
        )
    usage = body.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    input_tokens = _count(usage, "prompt_tokens")
    output_tokens = _count(usage, "completion_tokens")
    if input_tokens is None:
        input_tokens = estimate_message_tokens(request.messages)
    if output_tokens is None:
        output_tokens = estimate_tokens(content + "".join(call.tool + call.arguments_json for call in calls))
    finish_reason = choice.get("finish_reason")
    if not isinstance(finish_reason, str) or not finish_reason:
        finish_reason = "tool_calls" if calls else "stop"
    response_id = body.get("id")
    return ModelResponse(
        text=content,
        tool_calls=tuple(calls),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        finish_reason=finish_reason,
        response_id=response_id if isinstance(response_id, str) else "",
    )


def parse_retry_after(headers: Mapping[str, str], *, now: datetime | None = None) -> float | None:
    """Read how long the server asks to wait, from ``retry-after-ms`` or ``retry-after``.

    Args:
        headers: Response headers; keys are matched case-insensitively.
        now: Current time for HTTP-date values (defaults to now, UTC).

    Returns:
        Seconds to wait (0 for a date in the past), or ``None`` when absent or malformed.
    """
    lowered = {key.lower(): value for key, value in headers.items()}
    millis = _non_negative_float(lowered.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    value = lowered.get("retry-after")
    if value is None:
        return None
    seconds = _non_negative_float(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # HTTP dates are GMT; "-0000" parses as naive.
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def _non_negative_float(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


# A provider's answer wraps the model's tool call arguments a few levels down: it may nest somewhat
# deeper than the arguments themselves, which the decider bounds (INVALID_INPUT back to the model).
WIRE_JSON_LIMITS = JsonLimits(max_depth=256, max_bytes=1 << 30)


def wire_loads(text: str | bytes) -> Any:
    """A provider's JSON body or event, parsed within :data:`WIRE_JSON_LIMITS`.

    Raises:
        JsonBoundsError: a ``ValueError``; callers treat it as a body that is not JSON.
    """
    return loads_bounded(text, WIRE_JSON_LIMITS)


def _error_detail(body: bytes) -> tuple[str, str]:
    """Return (code, message) from an error body, OpenAI's ``{"error": {...}}`` or plain text."""
    try:
        decoded = wire_loads(body)
    except ValueError:
        return "", body.decode("utf-8", "replace").strip()[:_MAX_DETAIL]
    error = decoded.get("error") if isinstance(decoded, dict) else None
    if isinstance(error, dict):
        code = error.get("code") or error.get("type") or ""
        return str(code), str(error.get("message") or "")[:_MAX_DETAIL]
    if isinstance(error, str):  # some compatible servers send {"error": "..."}
        return "", error[:_MAX_DETAIL]
    return "", json.dumps(decoded)[:_MAX_DETAIL]


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
        headers: Response headers (``Retry-After`` and ``retry-after-ms`` are honoured).
        body: Response body.
        secret: The API key, removed from the message should the server echo it.
        now: Current time, for HTTP-date ``Retry-After`` values.

    Returns:
        Transient for 408, 409, 429 and 5xx (``reason`` ``overloaded`` for 529); auth for 401/403;
        permanent otherwise, with ``reason`` ``context_length_exceeded`` when the error's ``code``
        says so. Only the status and the body's typed fields decide: never its message.
    """
    code, detail = _error_detail(body)
    message = f"model endpoint returned HTTP {status_code}" + (f": {detail}" if detail else "")
    message = redact(message, secret)
    retry_after_s = parse_retry_after(headers, now=now)
    if status_code in (401, 403):
        reason = "unauthorized" if status_code == 401 else "forbidden"
        return ModelAuthError(message, reason=reason, status_code=status_code)
    if status_code == 429:
        if code == "insufficient_quota":
            # Out of credit, not rate limited: waiting does not help.
            return ModelPermanentError(message, reason="insufficient_quota", status_code=status_code)
        return ModelTransientError(
            message, reason="rate_limited", retry_after_s=retry_after_s, status_code=status_code
        )
    if status_code >= 500 or status_code in (408, 409):
        reason = _TRANSIENT_REASONS.get(status_code, "server_error")
        return ModelTransientError(
            message, reason=reason, retry_after_s=retry_after_s, status_code=status_code
        )
    if code == "context_length_exceeded":  # the typed code; a message is never read for a reason
        return ModelPermanentError(message, reason="context_length_exceeded", status_code=status_code)
    reason = {400: "bad_request", 404: "not_found", 413: "request_too_large", 422: "bad_request"}.get(
        status_code, "http_error"
    )
    return ModelPermanentError(message, reason=reason, status_code=status_code)
