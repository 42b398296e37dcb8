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

import json
from dataclasses import replace
from typing import TYPE_CHECKING

from runtime_server._config_limits import PayloadsConfig
from runtime_server.store._payloads import JSON, PayloadRef
from runtime_server.tools import ToolOutcome

if TYPE_CHECKING:
    from runtime_server.engine._driver import RunDriver

__all__ = ["bound_tool_outcome", "model_view", "utf8_size"]

# Room the truncation note and JSON framing take around the start of the result.
_VIEW_OVERHEAD = 512


def utf8_size(text: str) -> int:
    """Bytes of ``text`` in UTF-8, without encoding it when the answer is plain from its length."""
    if text.isascii():
        return len(text)
    return len(text.encode())


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


async def bound_tool_outcome(driver: RunDriver, outcome: ToolOutcome) -> ToolOutcome:
    """The outcome as it enters the log: small results as they are, large ones by reference."""
    if outcome.result_json is None or outcome.result_ref is not None:
        return outcome
    config: PayloadsConfig = driver.engine.settings.payloads
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
    engine = driver.engine
    ref = await engine.payloads.put(
        run_id=driver.run_id,
        tenant_id=driver.tenant_id,
        kind="tool_result",
        media_type=JSON,
        text=text,
        now_ms=engine.now_ms(),
    )
    view_max = config.model_view_max_bytes
    if size <= view_max:
        return replace(outcome, result_ref=ref.to_json())
    if config.oversized_result == "fail":
        message = (
            f"the result is {size} bytes, more than the {view_max} the model may see; "
            f"the full result is payload {ref.payload_id}"
        )
        failed = ToolOutcome.failure("RESULT_TOO_LARGE", message)
        assert failed.error is not None
        details = {"payload_id": ref.payload_id, "size_bytes": size, "sha256": ref.sha256}
        return replace(
            failed, error={**failed.error, "details_json": json.dumps(details)}, replayed=outcome.replayed
        )
    return replace(
        outcome,
        result_json=model_view(text, ref, max_bytes=view_max),
        result_ref=ref.to_json(),
        truncated=True,
    )
