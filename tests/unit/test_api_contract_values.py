"""The API edge of the v1 contract: StepKind, exact money from old rows, structured tool values."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format, struct_pb2
from google.protobuf.descriptor import FieldDescriptor
from hypothesis import given
from hypothesis import strategies as st

from agentrt.proto.runtime.v1 import run_pb2
from agentrt.server.api._convert import (
    STRUCTURED_LIMITS,
    STRUCTURED_TWINS,
    event_to_proto,
    json_value,
    step_kind_to_proto,
    structured_value,
)
from agentrt.server.core import events as ev
from agentrt.server.store import StoredEvent

ROOT = Path(__file__).resolve().parents[2]


def _convert(event_type: str, data: dict[str, Any]) -> Any:
    stored = StoredEvent(run_id="r", seq=1, type=event_type, payload=json.dumps(data), created_ms=0)
    return getattr(event_to_proto(stored), ev.oneof_field(event_type))


def test_every_core_step_kind_has_an_enum_value_and_back() -> None:
    mapped = {step_kind_to_proto(k) for k in ev.STEP_KINDS}
    assert run_pb2.STEP_KIND_UNSPECIFIED not in mapped
    assert mapped == set(run_pb2.StepKind.values()) - {run_pb2.STEP_KIND_UNSPECIFIED}


def test_the_core_writes_only_kinds_it_declares() -> None:
    # Hunts for a step.started written with a literal kind the API would not map.
    for path in (ROOT / "runtime_server").rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"""["']kind["']\s*:\s*["']""", text), f"{path}: write kinds as StepKind"


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        ("model", run_pb2.STEP_KIND_MODEL),
        ("diagnostic", run_pb2.STEP_KIND_DIAGNOSTIC),
        ("corrective", run_pb2.STEP_KIND_CORRECTIVE),
        ("STEP_KIND_CORRECTIVE", run_pb2.STEP_KIND_CORRECTIVE),  # a log in the API's JSON shape
        ("handoff", run_pb2.STEP_KIND_UNSPECIFIED),  # a kind newer than this runtime
        ("", run_pb2.STEP_KIND_UNSPECIFIED),
        (None, run_pb2.STEP_KIND_UNSPECIFIED),
        (["model"], run_pb2.STEP_KIND_UNSPECIFIED),
        (3, run_pb2.STEP_KIND_UNSPECIFIED),
    ],
)
def test_a_stored_step_kind_streams_as_the_enum(stored: object, expected: int) -> None:
    data: dict[str, Any] = {"step": 4, "reason": "identical_call: t", "usage": {"model_steps": 3}}
    if stored is not None:
        data["kind"] = stored
    body = _convert(ev.STEP_STARTED, data)
    assert body.kind == expected and body.step == 4 and body.usage.model_steps == 3


def test_old_float_dollars_in_any_event_stream_as_exact_micros() -> None:
    old = {"model_steps": 3, "cost_usd": 0.1 + 0.2}
    ended = _convert(ev.RUN_ENDED, {"phase": "RUN_PHASE_COMPLETED", "usage": old})
    assert ended.usage.cost_micros == 300_000 and ended.usage.model_steps == 3
    fault = _convert(ev.RUN_FAULT, {"step": 1, "usage_spent": old, "usage_after": old})
    assert fault.usage_spent.cost_micros == fault.usage_after.cost_micros == 300_000
    started = _convert(ev.RUN_STARTED, {"agent_name": "a", "budgets": {"max_cost_usd": 2.5}})
    assert started.budgets.max_cost_micros == 2_500_000


def _twin_fields() -> set[tuple[str, str]]:
    """(message, field) of every Value field of the runtime contract next to a *_json text field."""
    found = set()
    for message in run_pb2.DESCRIPTOR.message_types_by_name.values():
        for field in message.fields:
            value = field.message_type is not None and field.message_type.full_name == "google.protobuf.Value"
            if value and f"{field.name}_json" in message.fields_by_name:
                found.add((message.name, field.name))
            if field.type == FieldDescriptor.TYPE_STRING and field.name.endswith("_json"):
                twin = field.name.removesuffix("_json")
                assert twin in message.fields_by_name, f"{message.name}.{field.name} has no structured twin"
    return found


def test_every_json_text_field_has_a_structured_twin_the_api_fills() -> None:
    assert {(cls.DESCRIPTOR.name, twin) for cls, _, twin in STRUCTURED_TWINS} == _twin_fields()


def test_structured_values_are_filled_from_complete_json() -> None:
    arguments = {"order_id": "A100", "amount": 30.5, "tags": ["x", None, True], "n": {"deep": [1]}}
    text = json.dumps(arguments)
    completed = _convert(
        ev.MODEL_COMPLETED,
        {
            "step": 1,
            "tool_calls": [{"call_id": "c1", "tool": "t", "arguments_json": text}, {"call_id": "c2"}],
        },
    )
    assert json_format.MessageToDict(completed.tool_calls[0].arguments) == arguments
    assert completed.tool_calls[0].arguments_json == text  # the text stays the record
    assert not completed.tool_calls[1].HasField("arguments")
    started = _convert(ev.TOOL_STARTED, {"step": 1, "call_id": "c1", "tool": "t", "arguments_json": text})
    assert json_format.MessageToDict(started.arguments) == arguments
    result = _convert(ev.TOOL_COMPLETED, {"call_id": "c1", "result_json": '"plain string"'})
    assert result.result.string_value == "plain string"
    asked = _convert(ev.APPROVAL_REQUESTED, {"approval_id": "a", "arguments_json": text})
    assert json_format.MessageToDict(asked.arguments) == arguments


def test_a_preview_or_truncated_text_gets_no_structured_value() -> None:
    ref = {"payload_id": "p" * 64, "size_bytes": 10**6, "sha256": "0" * 64, "preview": "{}"}
    started = _convert(ev.TOOL_STARTED, {"call_id": "c", "arguments_json": "{}", "arguments_ref": ref})
    assert not started.HasField("arguments")
    completed = _convert(ev.TOOL_COMPLETED, {"call_id": "c", "result_json": "[1]", "truncated": True})
    assert not completed.HasField("result")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{not json",
        '{"a": NaN}',
        '{"a": Infinity}',
        "1" + "0" * 400,  # an integer no double holds: the text alone carries it
        "[" * (STRUCTURED_LIMITS.max_depth + 1) + "]" * (STRUCTURED_LIMITS.max_depth + 1),
        json.dumps({"k": "x" * STRUCTURED_LIMITS.max_bytes}),
        '"\\ud800"',  # a lone surrogate: not text a Value can carry
    ],
)
def test_json_outside_the_bounds_gets_no_structured_value_and_still_converts(text: str) -> None:
    assert structured_value(text) is None
    body = _convert(ev.TOOL_COMPLETED, {"call_id": "c", "result_json": text})
    assert body.result_json == text and not body.HasField("result")


def test_json_at_the_bounds_gets_a_structured_value_a_client_can_decode() -> None:
    depth = STRUCTURED_LIMITS.max_depth
    deep = "[" * depth + "]" * depth
    body = _convert(ev.TOOL_COMPLETED, {"call_id": "c", "result_json": deep})
    assert body.HasField("result")
    event = run_pb2.RunEvent(tool_completed=body)
    assert run_pb2.RunEvent.FromString(event.SerializeToString()) == event  # within decoders' recursion limit


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@given(_JSON)
def test_a_structured_value_is_the_one_protobufs_own_json_parser_makes(data: Any) -> None:
    expected = struct_pb2.Value()
    json_format.ParseDict(data, expected)
    made = json_value(data)
    assert made == expected
    assert made.SerializeToString(deterministic=True) == expected.SerializeToString(deterministic=True)
    assert structured_value(json.dumps(data)) == expected


def test_a_value_that_is_not_json_is_refused() -> None:
    with pytest.raises(TypeError, match="not a JSON value"):
        json_value(object())
