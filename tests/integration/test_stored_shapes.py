"""Nothing that reaches the store can later fail to convert (issue 9, R10.4).

Every stored shape goes through the store and back to protobuf, on SQLite and PostgreSQL, in
clear and sealed: each event type's payload with every field of its message set to values at
the edge of their range (and once empty), and run rows in every phase with full budgets,
usage, metadata and a pending approval. The shapes are built from the proto descriptors, so a
new event type or field is covered without touching this test.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from agentrt.proto.runtime.v1 import run_pb2
from agentrt.server.api._convert import STRUCTURED_TWINS, event_to_proto, run_to_proto
from agentrt.server.api._validate import MAX_BUDGET_COUNT, MAX_COST_MICROS, MAX_TOKENS
from agentrt.server.core import Budgets, Phase
from agentrt.server.core import events as ev
from agentrt.server.store import Store
from agentrt.toolhost.security import PayloadCipher

# Raw text columns: the API refuses NUL in what it stores as text (PostgreSQL cannot hold it).
TEXT = 'caf\u00e9 \u2603 \U0001f600 "quoted" \\ \n'
JSON_TEXT = TEXT + "\u0000"  # inside JSON payloads NUL is escaped and fine
_INT64 = {FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64}
_UINT64 = {FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64}
_INT32 = {FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32}


def _scalar(field: FieldDescriptor) -> Any:
    kind = field.type
    if kind in _INT64:
        return 2**63 - 1
    if kind in _UINT64:
        return 2**64 - 1
    if kind in _INT32:
        return 2**31 - 1
    if kind in {FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32}:
        return 2**32 - 1
    if kind == FieldDescriptor.TYPE_DOUBLE:
        return 1.7976931348623157e308
    if kind == FieldDescriptor.TYPE_FLOAT:
        return 3.0e38
    if kind == FieldDescriptor.TYPE_BOOL:
        return True
    if kind == FieldDescriptor.TYPE_STRING:
        return JSON_TEXT
    if kind == FieldDescriptor.TYPE_BYTES:
        return b"\x00\xff binary"
    if kind == FieldDescriptor.TYPE_ENUM:
        return field.enum_type.values[-1].number
    raise AssertionError(f"unhandled field type {kind}")


def _fill_well_known(message: Message) -> bool:
    name = message.DESCRIPTOR.full_name
    if name == "google.protobuf.Timestamp":
        message.FromJsonString("9999-12-31T23:59:59.999999999Z")  # type: ignore[attr-defined]
    elif name == "google.protobuf.Duration":
        message.FromJsonString("315576000000.999999999s")  # type: ignore[attr-defined]
    elif name == "google.protobuf.Struct":
        message.update({"text": TEXT, "n": 1.5, "list": [1, None, True, {"deep": ["x"]}]})  # type: ignore[attr-defined]
    elif name in {"google.protobuf.Value", "google.protobuf.ListValue"}:
        json_format.ParseDict([1, "x"] if name.endswith("ListValue") else {"k": TEXT}, message)
    else:
        return False
    return True


def fill(message: Message, depth: int = 0) -> Message:
    """Every field of ``message`` set (one member of each oneof), recursively to a bounded depth."""
    if _fill_well_known(message) or depth > 4:
        return message
    descriptor: Descriptor = message.DESCRIPTOR
    for field in descriptor.fields:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key_field, value_field = (
                field.message_type.fields_by_name["key"],
                field.message_type.fields_by_name["value"],
            )
            target = getattr(message, field.name)
            for i in range(2):
                key = _scalar(key_field) if key_field.type != FieldDescriptor.TYPE_STRING else f"k{i}{TEXT}"
                if key_field.type != FieldDescriptor.TYPE_STRING:
                    key = key - i
                if value_field.message_type is not None:
                    fill(target[key], depth + 1)
                else:
                    target[key] = _scalar(value_field)
            continue
        if field.is_repeated:
            target = getattr(message, field.name)
            for _ in range(2):
                if field.message_type is not None:
                    fill(target.add(), depth + 1)
                else:
                    target.append(_scalar(field))
            continue
        if field.message_type is not None:
            fill(getattr(message, field.name), depth + 1)
            getattr(message, field.name).SetInParent()
        else:
            setattr(message, field.name, _scalar(field))
    return message


def _ints_as_numbers(data: Any, descriptor: Descriptor) -> Any:
    """The proto JSON of a message with 64-bit integers as numbers, as the engine writes them."""
    if not isinstance(data, dict) or descriptor.full_name.startswith("google.protobuf."):
        return data
    out = dict(data)
    for name, value in data.items():
        field = descriptor.fields_by_name.get(name)
        if field is None:
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            inner = field.message_type.fields_by_name["value"]
            if inner.message_type is not None:
                out[name] = {k: _ints_as_numbers(v, inner.message_type) for k, v in value.items()}
            elif inner.type in _INT64 | _UINT64:
                out[name] = {k: int(v) for k, v in value.items()}
        elif field.message_type is not None:
            if field.is_repeated:
                out[name] = [_ints_as_numbers(v, field.message_type) for v in value]
            else:
                out[name] = _ints_as_numbers(value, field.message_type)
        elif field.type in _INT64 | _UINT64:
            out[name] = [int(v) for v in value] if isinstance(value, list) else int(value)
    return out


STORED_TYPES = [t for t in ev.EVENT_TYPES if t != ev.RUN_WAITING]  # run.waiting is stream-only


def _without_twins(message: Message) -> Message:
    """``message`` without the structured twins the API adds (never stored), recursively.

    The filled text fields are not JSON, so the API adds no twin on reading them back either.
    """
    for cls, _, twin in STRUCTURED_TWINS:
        if isinstance(message, cls):
            message.ClearField(twin)
    for field, value in message.ListFields():
        if field.message_type is None or field.message_type.full_name.startswith("google.protobuf."):
            continue
        if field.message_type.GetOptions().map_entry:
            continue
        for item in value if field.is_repeated else [value]:
            _without_twins(item)
    return message


def _event_bodies() -> list[tuple[str, Message, str]]:
    """(type, expected body, payload text) for every stored event type, in three shapes."""
    shapes: list[tuple[str, Message, str]] = []
    for event_type in STORED_TYPES:
        body = getattr(run_pb2.RunEvent(), ev.oneof_field(event_type))
        full = _without_twins(fill(type(body)()))
        as_json = json_format.MessageToDict(full, preserving_proto_field_name=True)
        if event_type == ev.STEP_STARTED:  # the engine writes the core's word; the API maps it
            shapes.append((event_type, full, json.dumps(as_json)))  # the enum's name reads too
            as_json["kind"] = run_pb2.StepKind.Name(full.kind).removeprefix("STEP_KIND_").lower()
        shapes.append((event_type, full, json.dumps(as_json)))
        native = _ints_as_numbers(as_json, full.DESCRIPTOR)
        shapes.append((event_type, full, json.dumps(native, ensure_ascii=False)))
        shapes.append((event_type, type(body)(), "{}"))
    return shapes


def _run_values(run_id: str, phase: Phase, **overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "run_id": run_id,
        "tenant_id": "t",
        "agent_name": "a",
        "agent_spec": "{}",
        "input": TEXT,
        "output": "",
        "reason": "",
        "phase": phase.value,
        "budgets": "{}",
        "usage": "{}",
        "request_key": None,
        "session_id": None,
        "metadata": "{}",
        "deadline_ms": 253402300799999,  # 9999-12-31
        "lease_owner": None,
        "lease_expires_ms": None,
        "lease_generation": 0,
        "cancel_requested_ms": None,
        "cancel_reason": None,
        "state_version": 1,
        "runtime_version": "0",
        "agent_config_hash": "h",
    }
    values.update(overrides)
    return values


@pytest.fixture(params=["clear", "sealed"])
async def store(request: pytest.FixtureRequest, db_url: str) -> AsyncIterator[Store]:
    cipher = PayloadCipher(keys={"k1": os.urandom(32)}, active="k1") if request.param == "sealed" else None
    opened = await Store.open(db_url, cipher=cipher)
    try:
        yield opened
    finally:
        await opened.close()


async def test_every_event_shape_reads_back_as_the_message_it_was(store: Store) -> None:
    shapes = _event_bodies()
    first = [(t, payload) for t, _, payload in shapes]
    record, _ = await store.create_run(_run_values("events-run", Phase.MODEL_STEP), first, 1_000)
    stored = await store.read_events(record.run_id, limit=len(shapes) + 1)
    assert [e.type for e in stored] == [t for t, _, _ in shapes]
    for (event_type, expected, _), event in zip(shapes, stored, strict=True):
        converted = event_to_proto(event)
        assert converted.WhichOneof("event") == ev.oneof_field(event_type)
        assert getattr(converted, ev.oneof_field(event_type)) == expected, event_type


def _full_budgets() -> tuple[str, run_pb2.Budgets]:
    core = Budgets(
        max_model_steps=MAX_BUDGET_COUNT,
        max_tool_calls=MAX_BUDGET_COUNT,
        max_calls_per_tool={"orders.lookup": 0, "refund.issue": MAX_BUDGET_COUNT},
        timeout_s=86_400.0,
        max_input_tokens=MAX_TOKENS,
        max_output_tokens=MAX_TOKENS,
        max_cost_micros=MAX_COST_MICROS,
        max_handoffs=MAX_BUDGET_COUNT,
        max_parallel_tool_calls=MAX_BUDGET_COUNT,
    )
    text = json.dumps(core.to_json())
    return text, json_format.ParseDict(json.loads(text), run_pb2.Budgets())


async def test_every_run_row_variant_reads_back(store: Store) -> None:
    budgets_text, budgets = _full_budgets()
    usage = fill(run_pb2.Usage())
    pending = _without_twins(fill(run_pb2.Run().pending_approval.__class__()))
    metadata = {f"k{i}": TEXT * 20 for i in range(8)}
    expected: dict[str, dict[str, Any]] = {}
    for index, phase in enumerate(Phase):
        for variant in ("bare", "full"):
            run_id = f"{index:02d}{variant}"
            overrides: dict[str, Any] = {}
            if variant == "full":
                overrides = {
                    "budgets": budgets_text,
                    "usage": json.dumps(json_format.MessageToDict(usage, preserving_proto_field_name=True)),
                    "metadata": json.dumps(metadata),
                    "request_key": f"key-{run_id}",
                    "request_hash": "f" * 64,
                    "session_id": "s" * 128,
                    "output": TEXT * 1000,
                    "reason": "r" * 400,
                    "cancel_requested_ms": 2_000,
                    "cancel_reason": "c" * 400,
                    "pending_approval": json.dumps(
                        json_format.MessageToDict(pending, preserving_proto_field_name=True)
                    ),
                    "fault_count": 2**31 - 1,
                    "input_ref": json.dumps({"payload_id": "p1", "size_bytes": 10, "sha256": "0" * 64}),
                    "pruned_ms": 3_000,
                }
            await store.create_run(_run_values(run_id, phase, **overrides), [(ev.RUN_STARTED, "{}")], 1_000)
            expected[run_id] = overrides
    listed, _ = await store.list_runs(tenant_id="t", page_size=500)
    assert len(listed) == len(expected)
    for record in listed:
        for source in (record, await store.get_run(record.run_id, tenant_id="t")):
            assert source is not None
            run = run_to_proto(source)
            overrides = expected[record.run_id]
            if overrides:
                assert run.budgets == budgets
                assert dict(run.metadata) == metadata
                assert run.output == TEXT * 1000
                assert run.session_id == "s" * 128
                if run.phase == run_pb2.RUN_PHASE_WAITING_APPROVAL:
                    assert run.pending_approval == pending
                for name in ("model_steps", "tool_calls", "input_tokens", "output_tokens", "cost_micros"):
                    assert getattr(run.usage, name) == getattr(usage, name)
            else:
                assert run.input == TEXT
