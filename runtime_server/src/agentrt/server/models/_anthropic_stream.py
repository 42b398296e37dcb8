"""Assembly of a streamed Messages API answer (``"stream": true``), without I/O.

The events, each a named SSE event whose data repeats the name in ``type``::

    message_start        message.usage.input_tokens (and the cache token counts)
    content_block_start  index, content_block: {"type": "text"} or {"type": "tool_use", id, name}
    content_block_delta  index, delta: {"type": "text_delta", text} or
                         {"type": "input_json_delta", partial_json}
    content_block_stop   index
    message_delta        delta.stop_reason, usage.output_tokens (cumulative)
    message_stop         the end
    ping                 keep-alive
    error                error: {"type": "overloaded_error", ...}; the stream ends with it

Event and block types not listed (thinking blocks, new events) are skipped, as Anthropic's
versioning policy asks of clients.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._anthropic_wire import _bad_response, _count, error_from_event, finish_reason, input_tokens
from ._openai_wire import from_wire_tool_name, wire_loads
from ._sse import ServerSentEvent
from ._tokens import estimate_message_tokens, estimate_tokens
from ._types import ModelRequest, ModelResponse, ModelToolCall

__all__ = ["MessagesStream"]


@dataclass(slots=True)
class _ToolUse:
    call_id: str
    name: str
    initial_input: Any
    partial_json: list[str] = field(default_factory=list)


class MessagesStream:
    """Collects the events of one streamed answer and feeds text fragments on as they come.

    Args:
        request: The request being answered (token estimates).
        tool_names: Wire tool name -> tool name, from ``build_messages_request``.
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
        self._tools: dict[int, _ToolUse] = {}
        self._input_tokens: int | None = None
        self._output_tokens: int | None = None
        self._stop_reason: object = None
        self._response_id = ""
        self.done = False

    def feed(self, event: ServerSentEvent) -> bool:
        """Take the next event; return ``True`` at ``message_stop``.

        Raises:
            ModelError: An ``error`` event (see ``error_from_event``), or an event of the wrong shape.
        """
        try:
            payload = wire_loads(event.data)
        except ValueError:
            raise _bad_response(f"the data of a {event.event} event is not JSON") from None
        if not isinstance(payload, dict):
            raise _bad_response(f"the data of a {event.event} event is not an object")
        kind = payload.get("type") or event.event
        match kind:
            case "message_start":
                message = payload.get("message")
                self._usage(message.get("usage") if isinstance(message, dict) else None)
                if isinstance(message, dict) and isinstance(message.get("id"), str):
                    self._response_id = message["id"]
            case "content_block_start":
                self._block_start(payload)
            case "content_block_delta":
                self._block_delta(payload)
            case "message_delta":
                delta = payload.get("delta")
                if isinstance(delta, dict) and delta.get("stop_reason"):
                    self._stop_reason = delta["stop_reason"]
                self._usage(payload.get("usage"))
            case "message_stop":
                self.done = True
                return True
            case "error":
                raise error_from_event(event.data, secret=self._secret)
            case _:
                pass  # ping, content_block_stop, and event types newer than this code
        return False

    def _usage(self, usage: object) -> None:
        if not isinstance(usage, dict):
            return
        # message_delta counts are cumulative: the last one seen wins.
        prompt = input_tokens(usage)
        if prompt is not None:
            self._input_tokens = prompt
        output = _count(usage, "output_tokens")
        if output is not None:
            self._output_tokens = output

    def _index(self, payload: dict[str, Any]) -> int:
        index = payload.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            raise _bad_response(f"a {payload.get('type')} event has no index")
        return index

    def _emit(self, text: object) -> None:
        if isinstance(text, str) and text:
            self._text.append(text)
            if self._on_text_delta is not None:
                self._on_text_delta(text)

    def _block_start(self, payload: dict[str, Any]) -> None:
        index = self._index(payload)
        block = payload.get("content_block")
        if not isinstance(block, dict):
            raise _bad_response("content_block_start without a content_block")
        if block.get("type") == "text":
            self._emit(block.get("text"))
        elif block.get("type") == "tool_use":
            call_id, name = block.get("id"), block.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str) or not name:
                raise _bad_response("a tool_use block without id or name")
            self._tools[index] = _ToolUse(call_id=call_id, name=name, initial_input=block.get("input"))

    def _block_delta(self, payload: dict[str, Any]) -> None:
        index = self._index(payload)
        delta = payload.get("delta")
        if not isinstance(delta, dict):
            raise _bad_response("content_block_delta without a delta")
        if delta.get("type") == "text_delta":
            self._emit(delta.get("text"))
        elif delta.get("type") == "input_json_delta":
            tool = self._tools.get(index)
            if tool is None:
                raise _bad_response(f"input_json_delta for block {index}, which is not a tool_use block")
            fragment = delta.get("partial_json")
            if isinstance(fragment, str):
                tool.partial_json.append(fragment)

    def response(self) -> ModelResponse:
        """Return the assembled answer; call after ``message_stop``."""
        calls: list[ModelToolCall] = []
        for index in sorted(self._tools):
            tool = self._tools[index]
            arguments = "".join(tool.partial_json)
            if not arguments.strip():
                # No input_json_delta at all: the input is the (normally empty) one of the start event.
                initial = tool.initial_input if isinstance(tool.initial_input, dict) else {}
                arguments = json.dumps(initial, separators=(",", ":"), ensure_ascii=False)
            calls.append(
                ModelToolCall(
                    call_id=tool.call_id,
                    tool=self._names.get(tool.name) or from_wire_tool_name(tool.name),
                    arguments_json=arguments,
                )
            )
        text = "".join(self._text)
        prompt, output = self._input_tokens, self._output_tokens
        return ModelResponse(
            text=text,
            tool_calls=tuple(calls),
            input_tokens=estimate_message_tokens(self._request.messages) if prompt is None else prompt,
            output_tokens=output
            if output is not None
            else estimate_tokens(text + "".join(call.tool + call.arguments_json for call in calls)),
            finish_reason=finish_reason(self._stop_reason, has_calls=bool(calls)),
            response_id=self._response_id,
        )
