"""Assembly of a streamed Chat Completions answer (``"stream": true``), without I/O.

The endpoint sends ``chat.completion.chunk`` objects as ``data:`` events and ends with
``data: [DONE]``. Text arrives as ``choices[0].delta.content`` fragments; a tool call arrives as
fragments that share its ``index`` (the first carries ``id`` and ``function.name``, the rest pieces
of ``function.arguments``); with ``stream_options.include_usage`` a last chunk with no choices
carries ``usage``. An endpoint may also send ``{"error": {...}}`` instead of a chunk.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ._errors import ModelError, ModelPermanentError, ModelTransientError
from ._openai_wire import _bad_response, _count, from_wire_tool_name, redact, wire_loads
from ._sse import ServerSentEvent
from ._tokens import estimate_message_tokens, estimate_tokens
from ._types import ModelRequest, ModelResponse, ModelToolCall

__all__ = ["ChatStream", "error_from_stream"]

_DONE = "[DONE]"
# The codes (or types) OpenAI and compatible servers give a rate limit.
_RATE_LIMIT_CODES = frozenset({"rate_limit_exceeded", "rate_limit_error"})
_MAX_DETAIL = 500


@dataclass(slots=True)
class _PartialCall:
    call_id: str = ""
    name: str = ""
    arguments: str = ""


def error_from_stream(error: Any, *, secret: str = "") -> ModelError:
    """Map an ``{"error": {...}}`` object sent inside a stream (no HTTP status to go by).

    Args:
        error: The value of ``error``.
        secret: The API key, removed from the message.

    Returns:
        Permanent for invalid requests (``context_length_exceeded`` when its ``code`` says so),
        transient otherwise: ``rate_limited`` or ``server_error``. Only the typed ``code`` and
        ``type`` decide, never the message.
    """
    fields = error if isinstance(error, dict) else {"message": error}
    kind = str(fields.get("code") or fields.get("type") or "")
    detail = str(fields.get("message") or "")[:_MAX_DETAIL]
    message = redact("model stream reported an error" + (f": {detail}" if detail else ""), secret)
    if kind == "context_length_exceeded":
        return ModelPermanentError(message, reason="context_length_exceeded")
    if kind == "invalid_request_error":
        return ModelPermanentError(message, reason="bad_request")
    if kind in _RATE_LIMIT_CODES:
        return ModelTransientError(message, reason="rate_limited")
    return ModelTransientError(message, reason="server_error")


class ChatStream:
    """Collects the events of one streamed answer and feeds text fragments on as they come.

    Args:
        request: The request being answered (fallback call ids, token estimates).
        tool_names: Wire function name -> tool name, from ``build_chat_request``.
        on_text_delta: Receives every non-empty text fragment at once.
        secret: The API key, removed from error messages.
    """

    def __init__(
        self,
        *,
        request: ModelRequest,
        tool_names: Mapping[str, str],
        on_text_delta: Callable[[str], None] | None,
        secret: str = "",
    ) -> None:
        self._request = request
        self._names = tool_names
        self._on_text_delta = on_text_delta
        self._secret = secret
        self._text: list[str] = []
        self._calls: dict[int, _PartialCall] = {}
        self._usage: Mapping[str, Any] = {}
        self._finish_reason = ""
        self._response_id = ""
        self.done = False

    def feed(self, event: ServerSentEvent) -> bool:
        """Take the next event; return ``True`` at ``[DONE]``.

        Raises:
            ModelError: The event is an error (see :func:`error_from_stream`), or not a chunk.
        """
        if event.data.strip() == _DONE:
            self.done = True
            return True
        try:
            chunk = wire_loads(event.data)
        except ValueError:
            raise _bad_response("a stream event is not JSON") from None
        if not isinstance(chunk, dict):
            raise _bad_response("a stream event is not a JSON object")
        if "error" in chunk and chunk["error"] is not None:
            raise error_from_stream(chunk["error"], secret=self._secret)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = usage
        chunk_id = chunk.get("id")
        if isinstance(chunk_id, str) and not self._response_id:
            self._response_id = chunk_id  # every chunk of one answer carries its id
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise _bad_response("choices of a stream chunk is not a list")
        for choice in choices:
            # Only the first choice is ours; n > 1 is never requested.
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._choice(choice)
        return False

    def _choice(self, choice: dict[str, Any]) -> None:
        finish_reason = choice.get("finish_reason")
        if isinstance(finish_reason, str) and finish_reason:
            self._finish_reason = finish_reason
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        for field in ("content", "refusal"):  # a refusal is the answer to show, when one comes
            fragment = delta.get(field)
            if isinstance(fragment, str) and fragment:
                self._text.append(fragment)
                if self._on_text_delta is not None:
                    self._on_text_delta(fragment)
        tool_calls = delta.get("tool_calls")
        if tool_calls is None:
            return
        if not isinstance(tool_calls, list):
            raise _bad_response("delta.tool_calls of a stream chunk is not a list")
        for position, raw in enumerate(tool_calls):
            if not isinstance(raw, dict):
                raise _bad_response("delta.tool_calls of a stream chunk holds a non-object")
            index = raw.get("index")
            if not isinstance(index, int) or isinstance(index, bool):
                index = position
            call = self._calls.setdefault(index, _PartialCall())
            call_id = raw.get("id")
            if isinstance(call_id, str) and call_id and not call.call_id:
                call.call_id = call_id
            function = raw.get("function")
            if isinstance(function, dict):
                # Names and arguments are both concatenated: some compatible servers split names too.
                name, arguments = function.get("name"), function.get("arguments")
                if isinstance(name, str):
                    call.name += name
                if isinstance(arguments, str):
                    call.arguments += arguments
                elif arguments is not None:  # an object instead of JSON text, from some servers
                    call.arguments += json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)

    def response(self) -> ModelResponse:
        """Return the assembled answer; call after ``[DONE]``.

        Raises:
            ModelPermanentError: A tool call came without a name (``bad_response``).
        """
        calls: list[ModelToolCall] = []
        for position, index in enumerate(sorted(self._calls)):
            partial = self._calls[index]
            if not partial.name:
                raise _bad_response(f"streamed tool call {index} has no function name")
            calls.append(
                ModelToolCall(
                    call_id=partial.call_id or f"call_{self._request.step}_{position}",
                    tool=self._names.get(partial.name) or from_wire_tool_name(partial.name),
                    arguments_json=partial.arguments,
                )
            )
        text = "".join(self._text)
        input_tokens = _count(self._usage, "prompt_tokens")
        output_tokens = _count(self._usage, "completion_tokens")
        if input_tokens is None:
            input_tokens = estimate_message_tokens(self._request.messages)
        if output_tokens is None:
            output_tokens = estimate_tokens(text + "".join(call.tool + call.arguments_json for call in calls))
        return ModelResponse(
            text=text,
            tool_calls=tuple(calls),
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            finish_reason=self._finish_reason or ("tool_calls" if calls else "stop"),
            response_id=self._response_id,
        )
