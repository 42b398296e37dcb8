"""What the model sees of a large value, and the size checks around it (pure functions)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from agentrt.server.core import RunCompleted, StepStarted
from agentrt.server.engine._payload_step import (
    MAX_EVENT_BYTES,
    EventTooLarge,
    model_view,
    text_view,
    utf8_size,
)
from agentrt.server.store import PayloadRef, RowUpdate, encode_commit
from agentrt.toolhost._errors import ErrorCode
from agentrt.toolhost._operations import _bounded

REF = PayloadRef(payload_id="ab" * 32, size_bytes=10_000_000, sha256="ab" * 32, preview="", media_type="x")
TEXTS = {
    "ascii": "a" * 300_000,
    "escapes": '"\\\n\x01' * 100_000,  # JSON escaping makes each character up to six bytes
    "multibyte": "é✓𝄞" * 100_000,
}


@pytest.mark.parametrize("kind", sorted(TEXTS))
@pytest.mark.parametrize("max_bytes", [1024, 4096, 65536])
def test_the_model_view_is_json_within_its_size_and_names_the_payload(kind: str, max_bytes: int) -> None:
    text = TEXTS[kind]
    view = model_view(text, REF, max_bytes=max_bytes)
    assert utf8_size(view) <= max_bytes
    data: dict[str, Any] = json.loads(view)
    assert data["truncated"] is True and data["payload_id"] == REF.payload_id
    assert f"payload {REF.payload_id} of {REF.size_bytes} bytes" in data["note"]
    assert text.startswith(data["partial_result"]) and len(data["partial_result"]) > max_bytes // 20


@pytest.mark.parametrize("kind", sorted(TEXTS))
def test_the_text_view_ends_with_the_marker_within_its_size(kind: str) -> None:
    view = text_view(TEXTS[kind], REF, max_bytes=4096)
    head, _, marker = view.rpartition("\n[truncated: ")
    assert utf8_size(view) <= 4096 and TEXTS[kind].startswith(head) and len(head) > 100
    assert marker == f"the full text is payload {REF.payload_id} of {REF.size_bytes} bytes]"


def test_an_event_past_the_maximum_is_refused_naming_only_its_type() -> None:
    # The run log encodes what the engine commits; the size is checked on that encoding.
    payloads, _ = encode_commit([RunCompleted(output="x" * (MAX_EVENT_BYTES - 100))], RowUpdate())
    assert len(payloads[0][1]) <= MAX_EVENT_BYTES
    huge = RunCompleted(output="é" * (MAX_EVENT_BYTES // 2 + 1))
    with pytest.raises(EventTooLarge) as caught:
        encode_commit([StepStarted(step=1), huge], RowUpdate(output=huge.output))
    assert caught.value.metadata == {"event_type": "run.completed"} and "é" not in caught.value.message


def op(limit: int) -> Any:
    return SimpleNamespace(max_result_bytes=limit, tool=SimpleNamespace(name="t"), key="k")


@pytest.mark.parametrize(
    ("result", "limit", "message"),
    [
        ("a" * 100, 100, None),
        ("a" * 101, 100, "the result is 101 bytes; the maximum is 100"),
        ("é" * 50, 100, None),
        ("é" * 51, 100, "the result is 102 bytes; the maximum is 100"),
        ("é" * 101, 100, "the result is at least 101 bytes; the maximum is 100"),
        ("a" * 10_000, 0, None),
    ],
)
def test_the_tool_host_bounds_results_by_utf8_bytes(result: str, limit: int, message: str | None) -> None:
    outcome = _bounded(op(limit), result)
    if message is None:
        assert outcome.result_json == result
    else:
        assert outcome.failure is not None and outcome.failure.code is ErrorCode.RESULT_TOO_LARGE
        assert outcome.failure.message == message
