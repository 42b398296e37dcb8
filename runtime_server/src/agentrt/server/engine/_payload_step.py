"""Large tool results become payloads; the model sees a bounded view of them (R8.4).

A result over ``payloads.inline_max_bytes`` is stored once (:class:`PayloadStore`) and the
``tool.completed`` event carries its reference. The event's ``result_json`` is what the model was
shown, so replaying the log rebuilds the same history without reading any payload:

- up to ``model_view_max_bytes``: the whole result;
- past it, ``oversized_result = "truncate"``: a JSON object with the start of the result and an
  explicit note that the full result is payload <id> of N bytes;
- past it, ``oversized_result = "fail"``: the call fails with ``RESULT_TOO_LARGE`` (the full result
  is still stored and named in the error's details).

A result over ``max_tool_result_bytes`` is refused (``RESULT_TOO_LARGE``) and not stored. The tool
host refuses it first when it knows the maximum (the call's ``x-agentrt-max-result-bytes``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace
from typing import Any

from agentrt.server.config import PayloadsConfig
from agentrt.server.core import RESULT_JSON_LIMITS, RUNTIME_MEMBERS, object_with_members
from agentrt.server.engine._ports import PayloadPort
from agentrt.server.engine._run import RunContext
from agentrt.server.engine._sizes import (
    MAX_ARGUMENTS_BYTES,
    MAX_EVENT_BYTES,
    EventTooLarge,
    ModelOutputTooLarge,
    utf8_size,
)
from agentrt.server.store._crypt import UnreadableRecord
from agentrt.server.store._payloads import JSON, TEXT, PayloadRef
from agentrt.server.tools import ToolOutcome

__all__ = [
    "MAX_ARGUMENTS_BYTES",
    "MAX_EVENT_BYTES",
    "EventTooLarge",
    "ModelOutputTooLarge",
    "bound_model_text",
    "bound_tool_outcome",
    "hydrate_input",
    "model_view",
    "store_input",
    "text_view",
    "utf8_size",
]

# Room the truncation note and JSON framing take around the start of the result.
_VIEW_OVERHEAD = 512


def model_view(text: str, ref: PayloadRef, *, max_bytes: int) -> str:
    """A JSON object of at most ``max_bytes`` bytes: the start of ``text`` and an explicit marker."""
    budget = max(0, max_bytes - _VIEW_OVERHEAD)
    head = text[:budget]
    while True:
        view = json.dumps(
            {
                "truncated": True,
                "note": (
                    f"The result is {ref.size_bytes} bytes; only its start is shown. "
                    f"The full result is payload {ref.payload_id} of {ref.size_bytes} bytes."
                ),
                "payload_id": ref.payload_id,
                "size_bytes": ref.size_bytes,
                "partial_result": head,
            },
            ensure_ascii=False,
        )
        size = utf8_size(view)
        if size <= max_bytes or not head:
            return view
        # Escapes and multi-byte characters made it longer than its characters: cut in proportion.
        head = head[: max(0, len(head) * max_bytes // size - 16)]


def text_view(text: str, ref: PayloadRef, *, max_bytes: int) -> str:
    """The start of a text, at most ``max_bytes`` bytes, ending with an explicit marker."""
    marker = f"\n[truncated: the full text is payload {ref.payload_id} of {ref.size_bytes} bytes]"
    head = text[: max(0, max_bytes - len(marker))]
    while utf8_size(head) + len(marker) > max_bytes and head:
        head = head[: len(head) * 3 // 4]
    return head + marker


async def bound_model_text(
    ctx: RunContext, text: str, arguments: list[str]
) -> tuple[str, dict[str, Any] | None]:
    """A model's text as it enters the log: inline, or a bounded view plus its payload's reference.

    The view is what the model sees of its own text later and, for a final answer, the run's output
    (with ``output_ref`` naming the whole text).

    Raises:
        ModelOutputTooLarge: The text is past ``max_model_output_bytes`` or the arguments of its
            tool calls are past MAX_ARGUMENTS_BYTES; nothing is stored.
    """
    config: PayloadsConfig = ctx.settings.payloads
    argument_bytes = sum(utf8_size(a) for a in arguments)
    if argument_bytes > MAX_ARGUMENTS_BYTES:
        raise ModelOutputTooLarge(
            f"the model's tool-call arguments are {argument_bytes} bytes; "
            f"the maximum is {MAX_ARGUMENTS_BYTES}"
        )
    if len(text) * 4 <= config.inline_max_bytes:
        return text, None
    size = utf8_size(text)
    if size > config.max_model_output_bytes:
        raise ModelOutputTooLarge(
            f"the model's text is {size} bytes; the maximum is {config.max_model_output_bytes}"
        )
    if size <= config.inline_max_bytes:
        return text, None
    ref = await ctx.ports.payloads.put(
        run_id=ctx.run_id,
        tenant_id=ctx.tenant_id,
        kind="model_text",
        media_type=TEXT,
        text=text,
        now_ms=ctx.ports.now_ms(),
    )
    return text_view(text, ref, max_bytes=config.model_view_max_bytes), ref.to_json()


async def store_input(
    payloads: PayloadPort, config: PayloadsConfig, run_id: str, tenant_id: str, text: str, now_ms: int
) -> tuple[str, dict[str, Any] | None]:
    """A run's input as its row and run.started show it: whole, or a view and its payload's reference."""
    if len(text) * 4 <= config.inline_max_bytes or utf8_size(text) <= config.inline_max_bytes:
        return text, None
    ref = await payloads.put(
        run_id=run_id, tenant_id=tenant_id, kind="input", media_type=TEXT, text=text, now_ms=now_ms
    )
    view_max = min(config.model_view_max_bytes, config.inline_max_bytes)
    return text_view(text, ref, max_bytes=view_max), ref.to_json()


async def hydrate_input(ctx: RunContext) -> None:
    """Put the whole input (a payload) where the replayed state holds its view: the model's history."""
    state = ctx.state
    ref = state.input_ref
    assert ref is not None
    payloads = ctx.ports.payloads
    stored = await payloads.find(run_id=ctx.run_id, payload_id=ref.payload_id, tenant_id=ctx.tenant_id)
    if stored is None:
        raise UnreadableRecord(
            f"run {ctx.run_id}: its input payload {ref.payload_id} is missing",
            metadata={"run_id": ctx.run_id},
        )
    parts = [part async for part in payloads.chunks(stored, chunk_bytes=1024 * 1024)]
    whole = b"".join(parts).decode()
    del parts
    view = state.input
    for i, entry in enumerate(state.history):
        if entry.role == "user" and entry.content == view:
            state.history[i] = dataclasses.replace(entry, content=whole)
            break
    state.input = whole


def runtime_members(text: str) -> str | None:
    """The members of a result object addressed to the runtime, as a JSON object; None for none."""
    result = object_with_members(text, RUNTIME_MEMBERS, RESULT_JSON_LIMITS)
    if result is None:
        return None
    return json.dumps({k: result[k] for k in RUNTIME_MEMBERS if k in result})


async def bound_tool_outcome(ctx: RunContext, outcome: ToolOutcome) -> ToolOutcome:
    """The outcome as it enters the log: small results as they are, large ones by reference."""
    if outcome.result_json is None or outcome.result_ref is not None:
        return outcome
    config: PayloadsConfig = ctx.settings.payloads
    text = outcome.result_json
    # Fast path: characters are at least one byte each and at most four.
    if len(text) * 4 <= config.inline_max_bytes:
        return outcome
    size = utf8_size(text)
    if size > config.max_tool_result_bytes:
        return ToolOutcome.failure(
            "RESULT_TOO_LARGE",
            f"the result is {size} bytes; the maximum is {config.max_tool_result_bytes}",
        )
    if size <= config.inline_max_bytes:
        return outcome
    ref = await ctx.ports.payloads.put(
        run_id=ctx.run_id,
        tenant_id=ctx.tenant_id,
        kind="tool_result",
        media_type=JSON,
        text=text,
        now_ms=ctx.ports.now_ms(),
    )
    view_max = config.model_view_max_bytes
    if size <= view_max:
        return replace(outcome, result_ref=ref.to_json())
    # The view (or the refusal) loses the members addressed to the runtime: keep them aside, so
    # a resource the call made is still cleaned up and its variables still set.
    outcome = replace(outcome, runtime_json=runtime_members(text))
    if config.oversized_result == "fail":
        message = (
            f"the result is {size} bytes, more than the {view_max} the model may see; "
            f"the full result is payload {ref.payload_id}"
        )
        details = {"payload_id": ref.payload_id, "size_bytes": size, "sha256": ref.sha256}
        failed = ToolOutcome.failure("RESULT_TOO_LARGE", message, details_json=json.dumps(details))
        return replace(
            failed,
            replayed=outcome.replayed,
            runtime_json=outcome.runtime_json,
            host=outcome.host,
        )
    return replace(
        outcome,
        result_json=model_view(text, ref, max_bytes=view_max),
        result_ref=ref.to_json(),
        truncated=True,
    )
