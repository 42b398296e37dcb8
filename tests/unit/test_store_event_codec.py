"""The event codec (store/_event_codec.py): typed core events <-> the stored proto3 JSON.

Three properties: every event class survives encode -> decode unchanged; every payload the
runtime writes survives decode -> encode byte for byte (so logs written before events were typed
read back, and new ones are written exactly as before); and every shape built from the proto
descriptors (tests/integration/test_stored_shapes.py) decodes and re-encodes to the same message.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2
from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.server.api._convert import event_body_from_json, event_to_proto, step_kind_to_proto
from agentrt.server.core import (
    ApprovalDecision,
    ApprovalResolved,
    ModelCompleted,
    OutcomeDecision,
    OutcomeResolved,
    Phase,
    RunCheckpointed,
    RunEnded,
    RunFault,
    RunStarted,
    StepKind,
    StepStarted,
    ToolError,
    ToolErrorCode,
    ToolFailed,
    ToolStarted,
)
from agentrt.server.core import events as ev
from agentrt.server.store import (
    StoredEvent,
    UndecodableEvent,
    UnreadableRecord,
    approval_decision_from_json,
    decode_event,
    encode_event,
    event_to_json,
    outcome_decision_from_json,
    tool_error_from_json,
)
from tests.integration.test_stored_shapes import _event_bodies
from tests.unit._event_samples import any_event, event_strategy

# -- encode -> decode, for every class core lists (samples derived from the fields) ---------------


@pytest.mark.parametrize("cls", list(ev.EVENT_CLASSES.values()), ids=lambda cls: cls.type_name)
def test_every_event_class_has_a_type_name_and_samples(cls: type[Any]) -> None:
    assert ev.EVENT_CLASSES[cls.type_name] is cls
    event_strategy(cls)  # TypeError for a field type the samples (and so the codec's tests) do not know


def test_every_stored_type_has_a_class() -> None:
    assert set(ev.EVENT_CLASSES) == set(ev.EVENT_TYPES) - {ev.RUN_WAITING}  # made by the API alone


@pytest.mark.parametrize("cls", list(ev.EVENT_CLASSES.values()), ids=lambda cls: cls.type_name)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_decode_of_encode_is_the_event_and_encodes_the_same(cls: type[Any], data: st.DataObject) -> None:
    event = data.draw(event_strategy(cls))
    event_type, payload = encode_event(event)
    assert event_type == event.type_name
    decoded = decode_event(event_type, payload)
    assert decoded == event
    assert decode_event(event_type, json.loads(payload)) == event  # a parsed payload reads the same
    assert encode_event(decoded) == (event_type, payload)  # stable: a second trip writes the same bytes


@settings(max_examples=100, deadline=None)
@given(any_event())
def test_decode_of_encode_is_the_event_for_any_class(event: ev.Event) -> None:
    assert decode_event(*encode_event(event)) == event


def _body_type(event_type: str) -> type[Any]:
    return type(getattr(run_pb2.RunEvent(), ev.oneof_field(event_type)))


def _holds_a_value(descriptor: Descriptor, seen: frozenset[str] = frozenset()) -> bool:
    for field in descriptor.fields:
        kind = field.message_type
        if kind is None or kind.full_name in seen:
            continue
        if kind.full_name == "google.protobuf.Value" or _holds_a_value(kind, seen | {kind.full_name}):
            return True
    return False


@settings(max_examples=300)
@given(any_event())
def test_what_the_engine_writes_takes_the_fast_conversion_and_it_equals_parse_dict(event: ev.Event) -> None:
    # Keyword construction with parsed Timestamps and Durations, not the ParseDict fallback, for
    # every event the engine writes, and the message is exactly ParseDict's. Values past the
    # proto's ranges (which the samples draw and the engine never holds) both refuse.
    event_type, payload = encode_event(event)
    data = json.loads(payload)
    if event_type == ev.STEP_STARTED:  # event_to_proto maps the core's word before converting
        data["kind"] = step_kind_to_proto(data.get("kind"))
    slow = _body_type(event_type)()
    try:
        json_format.ParseDict(data, slow)
    except json_format.ParseError:
        with pytest.raises((TypeError, ValueError)):
            event_body_from_json(_body_type(event_type), data)
        return
    if _holds_a_value(slow.DESCRIPTOR):  # a Value from plain JSON is ParseDict's alone
        with contextlib.suppress(TypeError, ValueError):
            assert event_body_from_json(_body_type(event_type), data) == slow
        return
    assert event_body_from_json(_body_type(event_type), data) == slow


@pytest.mark.parametrize(("event_type", "payload"), [(t, p) for t, _, p in _event_bodies() if p != "{}"])
def test_the_fast_conversion_of_every_shape_equals_parse_dict_or_refuses(
    event_type: str, payload: str
) -> None:
    data = json.loads(payload)
    if event_type == ev.STEP_STARTED:
        data["kind"] = step_kind_to_proto(data.get("kind"))
    slow = _body_type(event_type)()
    json_format.ParseDict(data, slow)
    try:
        fast = event_body_from_json(_body_type(event_type), data)
    except (TypeError, ValueError):
        return  # a shape only ParseDict reads (int64 as strings, enum names): event_to_proto falls back
    assert fast == slow


def test_a_malformed_timestamp_string_is_refused_by_both_conversions() -> None:
    data = {"call_id": "c", "start_time": "yesterday"}
    with pytest.raises(ValueError):
        event_body_from_json(run_pb2.ToolCompleted, data)
    with pytest.raises(json_format.ParseError):
        event_to_proto(StoredEvent("r", 1, ev.TOOL_COMPLETED, json.dumps(data), 1))


# -- decode -> encode, for what the runtime writes (byte for byte) --------------------------------

_USAGE = (
    '{{"model_steps": {}, "tool_calls": {}, "input_tokens": {}, "output_tokens": {}, '
    '"cost_micros": {}, "handoffs": 0}}'
)
_U0 = _USAGE.format(0, 0, 0, 0, 0)
_U1 = _USAGE.format(1, 0, 12, 7, 30)
_U2 = _USAGE.format(1, 1, 12, 7, 30)
_REF = '{"payload_id": "p1", "size_bytes": 70000, "sha256": "ab", "preview": "x", "media_type": "text/plain"}'

# Each as the runtime wrote it before events were typed: same keys, same order, same omissions.
WRITTEN: list[tuple[str, str]] = [
    (
        ev.RUN_STARTED,
        '{"agent_name": "support", "input": "hi", "budgets": {"max_model_steps": 20, "max_tool_calls": 50, '
        '"timeout": "300.000s", "max_parallel_tool_calls": 1}, "deadline": "2026-05-01T12:05:00.000Z", '
        '"started_by": "alice"}',
    ),
    (
        ev.RUN_STARTED,
        '{"agent_name": "a", "input": "view", "budgets": {"max_model_steps": 3, "max_tool_calls": 5, '
        '"timeout": "30.500s", "max_parallel_tool_calls": 2, "max_calls_per_tool": {"t": 1}, '
        '"max_cost_micros": 500000}, "deadline": "2026-05-01T12:05:00.000Z", "started_by": "", '
        '"session_history": [{"run_id": "r0", "input": "before", "output": "answer"}], '
        f'"input_ref": {_REF}}}',
    ),
    (  # a traced run names its trace (issue 17); an untraced one writes what it always wrote
        ev.RUN_STARTED,
        '{"agent_name": "a", "input": "x", "budgets": {"max_model_steps": 3, "max_tool_calls": 5, '
        '"timeout": "30.000s", "max_parallel_tool_calls": 1}, "deadline": "2026-05-01T12:05:00.000Z", '
        '"started_by": "", "trace_id": "0af7651916cd43dd8448eb211c80319c"}',
    ),
    (ev.STEP_STARTED, f'{{"step": 1, "kind": "model", "usage": {_U0}}}'),
    (ev.STEP_STARTED, f'{{"step": 4, "kind": "diagnostic", "reason": "identical_call: t", "usage": {_U1}}}'),
    (ev.STEP_STARTED, f'{{"step": 5, "kind": "corrective", "reason": "output_invalid: x", "usage": {_U1}}}'),
    (
        ev.MODEL_COMPLETED,
        '{"step": 1, "text": "", "tool_calls": [{"call_id": "c1", "tool": "t", "arguments_json": "{}"}], '
        f'"usage_before": {_U0}, "usage_after": {_U1}}}',
    ),
    (
        ev.MODEL_COMPLETED,
        f'{{"step": 3, "text": "done", "tool_calls": [], "usage_before": {_U1}, "usage_after": {_U1}}}',
    ),
    (
        ev.MODEL_COMPLETED,
        f'{{"step": 3, "text": "view", "tool_calls": [], "usage_before": {_U0}, "usage_after": {_U1}, '
        f'"text_ref": {_REF}}}',
    ),
    (
        ev.TOOL_STARTED,
        '{"step": 2, "call_id": "c1", "tool": "t", "arguments_json": "{}", "idempotency_key": "k", '
        f'"attempt": 1, "usage_before": {_U1}, "usage_after": {_U2}, "tool_version": "1.2"}}',
    ),
    (
        ev.TOOL_STARTED,
        '{"step": 2, "call_id": "c1", "tool": "t", "arguments_json": "{}", "idempotency_key": "k", '
        f'"attempt": 2, "usage_before": {_U2}, "usage_after": {_U2}}}',
    ),
    (ev.TOOL_COMPLETED, '{"step": 2, "call_id": "c1", "tool": "t", "result_json": "{}", "replayed": false}'),
    (
        ev.TOOL_COMPLETED,
        '{"step": 2, "call_id": "c1", "tool": "t", "result_json": "{\\"truncated\\": true}", '
        f'"replayed": true, "result_ref": {_REF}, "truncated": true}}',
    ),
    (
        ev.TOOL_COMPLETED,
        f'{{"step": 2, "call_id": "c1", "tool": "t", "result_json": "[1]", "replayed": false, '
        f'"result_ref": {_REF}, "truncated": false}}',
    ),
    (
        ev.TOOL_FAILED,
        '{"step": 2, "call_id": "c1", "tool": "t", "error": {"code": "TOOL_ERROR_CODE_NOT_ALLOWED", '
        '"message": "tool \'t\' is not available to this agent"}}',
    ),
    (
        ev.TOOL_FAILED,
        '{"step": 2, "call_id": "c1", "tool": "t", "error": {"code": "TOOL_ERROR_CODE_RESULT_TOO_LARGE", '
        '"message": "too big", "details_json": "{\\"payload_id\\": \\"p1\\"}"}}',
    ),
    # A tool host's UNSPECIFIED error with no message: protobuf's JSON leaves both out.
    (ev.TOOL_FAILED, '{"step": 2, "call_id": "c1", "tool": "t", "error": {}}'),
    # The context window and the reproducibility record (issue 11): written only when present.
    (
        ev.STEP_STARTED,
        f'{{"step": 3, "kind": "model", "usage": {_U1}, "context": {{"strategy": "keep_recent", '
        '"limit_tokens": 800, "estimated_tokens": 640, "full_tokens": 1900, "omitted_after_input": 4, '
        '"clipped": [{"call_id": "c9", "kept_bytes": 600, "full_bytes": 9000, "entry": 7}], "summary": "s"}}',
    ),
    (
        ev.MODEL_COMPLETED,
        f'{{"step": 1, "text": "hi", "tool_calls": [], "usage_before": {_U0}, "usage_after": {_U1}, '
        '"sampling": {"temperature": 0.2, "seed": 7}, "model": "openai/gpt-x", "response_id": "chatcmpl-1", '
        '"request_id": "req-1", "latency": "0.250s"}',
    ),
    (
        ev.MODEL_COMPLETED,
        f'{{"step": 2, "text": "", "tool_calls": [], "usage_before": {_U0}, "usage_after": {_U1}, '
        '"latency": "0.250s", "prompt_estimate_tokens": 1900}',
    ),
    (
        ev.STEP_STARTED,
        f'{{"step": 3, "kind": "model", "usage": {_U1}, "context": {{"strategy": "keep_recent", '
        '"limit_tokens": 800, "estimated_tokens": 640, "full_tokens": 1900, "token_scale_permille": 1650}}',
    ),
    (
        ev.TOOL_COMPLETED,
        '{"step": 2, "call_id": "c1", "tool": "t", "result_json": "{}", "replayed": false, '
        '"start_time": "2026-05-01T12:00:00.125Z", "end_time": "2026-05-01T12:00:00.250Z", "host": "h1"}',
    ),
    (
        ev.TOOL_FAILED,
        '{"step": 2, "call_id": "c1", "tool": "t", "error": {}, "end_time": "2026-05-01T12:00:00.250Z"}',
    ),
    (
        ev.HANDOFF,
        '{"step": 2, "call_id": "c1", "from_agent": "triage", "to_agent": "billing", "reason": "refund", '
        '"usage_after": {"model_steps": 1, "tool_calls": 0, "input_tokens": 12, "output_tokens": 7, '
        '"cost_micros": 30, "handoffs": 1}}',
    ),
    (
        ev.APPROVAL_REQUESTED,
        '{"approval_id": "a1", "call_id": "c1", "tool": "refund.issue", "arguments_json": "{\\"x\\":1}", '
        '"args_hash": "ff", "impact_summary": "refunds 5", "policy_version": "1", '
        '"expire_time": "2026-05-01T13:00:00.000Z", "request_time": "2026-05-01T12:00:00.000Z", '
        '"tool_version": "2.0"}',
    ),
    (
        ev.APPROVAL_REQUESTED,
        '{"approval_id": "a2", "call_id": "", "tool": "budget.tool_calls", "arguments_json": "{}", '
        '"args_hash": "ff", "impact_summary": "more", "policy_version": "budget-pause-1", '
        '"expire_time": "2026-05-01T13:00:00.000Z", "request_time": "2026-05-01T12:00:00.000Z"}',
    ),
    (
        ev.APPROVAL_RESOLVED,
        '{"approval_id": "a1", "decision": "APPROVAL_DECISION_APPROVE", "approver": "bob", "comment": ""}',
    ),
    (
        ev.APPROVAL_RESOLVED,
        '{"approval_id": "a1", "decision": "APPROVAL_DECISION_REJECT", "approver": "bob", "comment": "no"}',
    ),
    (
        ev.RETRY_SCHEDULED,
        '{"call_id": "c1", "attempt": 2, "delay": "0.250s", "reason": "TOOL_ERROR_CODE_TRANSIENT: down", '
        '"due_time": "2026-05-01T12:00:00.250Z"}',
    ),
    (
        ev.RETRY_SCHEDULED,
        '{"call_id": "", "step": 3, "attempt": 2, "delay": "1.000s", "reason": "model rate_limited: slow", '
        '"due_time": "2026-05-01T12:00:01.000Z"}',
    ),
    (ev.RUN_CHECKPOINTED, '{"through_seq": 12}'),
    (ev.CANCEL_REQUESTED, '{"reason": "user", "requested_by": "alice"}'),
    (ev.RUN_COMPLETED, '{"output": "done"}'),
    (ev.RUN_COMPLETED, f'{{"output": "view", "output_ref": {_REF}}}'),
    (ev.RUN_FAILED, '{"reason": "loop_detected", "message": "identical_call: t"}'),
    (ev.RUN_CANCELLED, '{"reason": "user"}'),
    *(
        (
            ev.RUN_ENDED,
            f'{{"phase": "RUN_PHASE_{phase}", "reason": "r", "partial": true, "retryable": false, '
            f'"usage": {_U2}}}',
        )
        for phase in ("COMPLETED", "FAILED", "CANCELLED", "EXPIRED")
    ),
    (
        ev.TOOL_OUTCOME_UNKNOWN,
        '{"step": 2, "call_id": "c1", "tool": "t", "idempotency_key": "k", "reason": "cut off", '
        '"call_deadline": "2026-05-01T12:00:30.000Z"}',
    ),
    (
        ev.TOOL_OUTCOME_UNKNOWN,
        '{"step": 2, "call_id": "c1", "tool": "t", "idempotency_key": "k", "reason": "recovered call"}',
    ),
    (
        ev.TOOL_OUTCOME_UNKNOWN,
        '{"step": 2, "call_id": "c1", "tool": "t", "idempotency_key": "k", "reason": "cut off", '
        '"call_deadline": "2026-05-01T12:00:30.000Z", "unknown_time": "2026-05-01T12:00:30.500Z"}',
    ),
    (
        ev.RUN_ENDED,
        f'{{"phase": "RUN_PHASE_CANCELLED", "reason": "user", "partial": true, "retryable": false, '
        f'"usage": {_U2}, "completed_calls": [{{"call_id": "c1", "tool": "t", "step": 2}}], '
        '"not_completed_calls": [{"call_id": "c2", "tool": "u", "step": 2, "detail": "not_started"}, '
        '{"call_id": "c3", "tool": "v", "step": 3, "detail": "TOOL_ERROR_CODE_PERMANENT"}], '
        '"unknown_calls": [{"call_id": "c4", "tool": "w", "step": 3}]}',
    ),
    (
        ev.RUN_ESCALATED,
        '{"reason": "unknown_outcome_age", "age": "3600.000s", "call_id": "c1", "approval_id": ""}',
    ),
    (
        ev.RUN_ESCALATED,
        '{"reason": "approval_age", "age": "14400.500s", "call_id": "c1", "approval_id": "a1"}',
    ),
    *(
        (
            ev.OUTCOME_RESOLVED,
            f'{{"call_id": "c1", "decision": "OUTCOME_DECISION_{d}", "resolved_by": "bob", "comment": ""}}',
        )
        for d in ("SUCCEEDED", "FAILED", "RETRY")
    ),
    (
        ev.RUN_FAULT,
        '{"step": 2, "error_class": "OSError", "message": "OSError: disk", "fault_count": 1, '
        f'"max_faults": 3, "usage_spent": {_U0}, "usage_after": {_U2}}}',
    ),
    (ev.MODEL_TEXT_DELTA, '{"step": 1, "attempt": 1, "text": "Hel"}'),
    (ev.MODEL_TEXT_DELTA, '{"step": 1, "attempt": 1, "superseded": true}'),
    (
        ev.TOOL_COMPLETED,
        '{"step": 4, "call_id": "c2", "tool": "refund.issue", "result_json": "{}", "replayed": false, '
        '"deduplicated": true, "duplicate_of": {"intent_key": "ab", "idempotency_key": "k1", "run_id": "r", '
        '"call_id": "c1", "first_time": "2026-05-01T12:00:00.125Z"}}',
    ),
    (
        ev.APPROVAL_REQUESTED,
        '{"approval_id": "a1", "call_id": "c1", "tool": "refund.issue", "arguments_json": "{}", '
        '"args_hash": "ff", "impact_summary": "refunds 5", "policy_version": "1", '
        '"expire_time": "2026-05-01T13:00:00.000Z", "request_time": "2026-05-01T12:00:00.000Z", '
        '"variables": {"order_id": "A100", "verified": true, "amount": 12.5}}',
    ),
    (
        ev.APPROVAL_RESOLVED,
        '{"approval_id": "a1", "decision": "APPROVAL_DECISION_APPROVE", "approver": "bob", "comment": "", '
        '"override_intent": true}',
    ),
    (
        ev.VARIABLES_SET,
        '{"step": 2, "call_id": "c1", "tool": "orders.lookup", "variables": {"order_id": "A100", '
        '"order_status": "delivered"}, "removed": ["old"]}',
    ),
    (
        ev.VARIABLES_SET,
        '{"step": 2, "call_id": "c1", "tool": "t", "refused_reason": "variables refused: too many"}',
    ),
    (
        ev.RUN_CLOSING,
        '{"phase": "RUN_PHASE_CANCELLED", "reason": "user", "message": "", "retryable": false, "output": ""}',
    ),
    (
        ev.RUN_CLOSING,
        '{"phase": "RUN_PHASE_COMPLETED", "reason": "final_answer", "message": "", "retryable": false, '
        f'"output": "view", "output_ref": {_REF}}}',
    ),
    (
        ev.CLEANUP_REGISTERED,
        '{"cleanup_id": "c1", "kind": "CLEANUP_KIND_TOOL", "target": "sandbox.destroy", '
        '"arguments_json": "{\\"id\\":\\"s1\\"}", "call_id": "c1", "step": 2}',
    ),
    (
        ev.CLEANUP_REGISTERED,
        '{"cleanup_id": "", "kind": "CLEANUP_KIND_HOOK", "target": "x", "arguments_json": "", '
        '"call_id": "c1", "step": 2, "refused_reason": "cleanup refused: too many"}',
    ),
    (
        ev.CLEANUP_STARTED,
        '{"cleanup_id": "c1", "attempt": 1, "idempotency_key": "cleanup:r:c1", '
        '"deadline": "2026-05-01T12:01:00.000Z"}',
    ),
    (ev.CLEANUP_STARTED, '{"cleanup_id": "c2", "attempt": 2, "idempotency_key": "cleanup:r:c2"}'),
    (ev.CLEANUP_COMPLETED, '{"cleanup_id": "c1", "attempt": 1}'),
    (
        ev.SUMMARY_COMPLETED,
        f'{{"step": 5, "text": "Looked up 1-3.", "entries": 6, "usage_before": {_U0}, "usage_after": {_U1}, '
        '"model": "openai/gpt-x", "response_id": "chatcmpl-9", "request_id": "", "latency": "0.400s"}',
    ),
    (ev.CLEANUP_FAILED, '{"cleanup_id": "c1", "attempt": 3, "message": "TRANSIENT: down", "final": true}'),
    (ev.CLEANUP_SETTLED, '{"retries": 2}'),
]


@pytest.mark.parametrize(("event_type", "payload"), WRITTEN)
def test_what_the_runtime_writes_decodes_and_encodes_back_byte_for_byte(
    event_type: str, payload: str
) -> None:
    event = decode_event(event_type, payload)
    assert type(event).type_name == event_type
    assert encode_event(event) == (event_type, payload)


def test_every_stored_type_has_a_written_sample() -> None:
    assert {t for t, _ in WRITTEN} == set(ev.EVENT_CLASSES)


@pytest.mark.parametrize(("event_type", "payload"), WRITTEN)
def test_what_the_runtime_writes_folds_the_same_through_the_api(event_type: str, payload: str) -> None:
    # The API converts the re-encoded payload to the very message it made of the stored one.
    stored = StoredEvent("r", 1, event_type, payload, 1000)
    again = StoredEvent("r", 1, *encode_event(decode_event(event_type, payload)), 1000)
    assert event_to_proto(again) == event_to_proto(stored)


# -- every shape built from the proto descriptors ------------------------------------------------

# Values no runtime writes and the typed event cannot hold: a decision outside OutcomeDecision
# (the API accepts only its names) and a Duration finer than the milliseconds budgets keep.
_LOSSY = {ev.OUTCOME_RESOLVED, ev.RUN_STARTED}
_SHAPES = [(t, payload) for t, _, payload in _event_bodies()]


@pytest.mark.parametrize(
    ("event_type", "payload"),
    [(t, payload) for t, payload in _SHAPES if payload != "{}"],
    ids=lambda value: value if value in ev.EVENT_TYPES else "",
)
def test_every_proto_shape_decodes_and_re_encodes_to_the_same_message(event_type: str, payload: str) -> None:
    event = decode_event(event_type, payload)
    assert decode_event(*encode_event(event)) == event
    if event_type not in _LOSSY:
        again = event_to_proto(StoredEvent("r", 1, *encode_event(event), 1000))
        assert again == event_to_proto(StoredEvent("r", 1, event_type, payload, 1000))


@pytest.mark.parametrize("event_type", [t for t, payload in _SHAPES if payload == "{}"])
def test_an_empty_payload_decodes_to_the_defaults(event_type: str) -> None:
    if event_type in (ev.RUN_ENDED, ev.RUN_CLOSING):  # RunPhase has no default a run can end in
        with pytest.raises(UndecodableEvent, match="without a phase"):
            decode_event(event_type, "{}")
        return
    event = decode_event(event_type, "{}")
    assert decode_event(*encode_event(event)) == event


def test_the_lossy_fields_are_only_what_no_runtime_writes() -> None:
    full = {t: payload for t, _, payload in _event_bodies() if payload != "{}"}
    resolved = decode_event(ev.OUTCOME_RESOLVED, full[ev.OUTCOME_RESOLVED])
    assert isinstance(resolved, OutcomeResolved) and resolved.decision is OutcomeDecision.UNSPECIFIED
    started = decode_event(ev.RUN_STARTED, full[ev.RUN_STARTED])
    assert isinstance(started, RunStarted) and started.budgets is not None
    assert started.budgets.max_input_tokens == 2**63 - 1  # int64 as a proto3 JSON string reads as int


# -- what decoding accepts, and what it refuses ---------------------------------------------------


def test_omitted_keys_read_as_absent_or_as_proto_defaults() -> None:
    started = decode_event(ev.TOOL_STARTED, {"step": 2, "call_id": "c1"})
    assert started == ToolStarted(step=2, call_id="c1")  # attempt, tool_version absent
    assert decode_event(ev.STEP_STARTED, {"step": 1, "kind": "diagnostic", "loop": "x"}) == StepStarted(
        step=1, kind=StepKind.DIAGNOSTIC
    )  # a v1 log's "loop" is the upgrader's business; unknown keys are ignored
    fault = decode_event(ev.RUN_FAULT, {"step": 1, "usage_after": {}})
    assert isinstance(fault, RunFault) and fault.usage_after is None and fault.fault_count is None
    # An empty sampling record is no record: not written, and read as None.
    assert "sampling" not in event_to_json(ModelCompleted(step=1, sampling={}))
    completed = decode_event(ev.MODEL_COMPLETED, {"step": 1, "sampling": {}})
    assert isinstance(completed, ModelCompleted) and completed.sampling is None


def test_older_and_api_shaped_values_read_as_the_core_words() -> None:
    kinds = [decode_event(ev.STEP_STARTED, {"step": 1, "kind": k}) for k in ("STEP_KIND_CORRECTIVE", "x", 3)]
    assert [k.kind for k in kinds if isinstance(k, StepStarted)] == [
        StepKind.CORRECTIVE,
        StepKind.MODEL,  # a kind newer than this runtime steps like a model step, as it always has
        StepKind.MODEL,
    ]
    ended = decode_event(ev.RUN_ENDED, {"phase": run_pb2.RUN_PHASE_FAILED, "usage": {"cost_usd": 0.5}})
    assert isinstance(ended, RunEnded) and ended.phase is Phase.FAILED
    assert ended.usage.cost_micros == 500_000  # float dollars of a run stored before money was exact
    counted = decode_event(ev.RUN_CHECKPOINTED, {"through_seq": "9007199254740993"})
    assert counted == RunCheckpointed(through_seq=9007199254740993)


def test_tool_errors_read_by_name_number_or_not_at_all() -> None:
    assert tool_error_from_json({}) == ToolError(ToolErrorCode.UNSPECIFIED)
    assert tool_error_from_json({"code": 3, "message": "m"}) == ToolError(ToolErrorCode.TRANSIENT, "m")
    assert tool_error_from_json({"code": 99}).code is ToolErrorCode.UNSPECIFIED  # a newer tool host
    assert tool_error_from_json({"code": ["x"]}).code is ToolErrorCode.UNSPECIFIED
    assert approval_decision_from_json("APPROVAL_DECISION_APPROVE") is ApprovalDecision.APPROVE
    assert approval_decision_from_json(None) is ApprovalDecision.UNSPECIFIED
    assert outcome_decision_from_json("OUTCOME_DECISION_RETRY") is OutcomeDecision.RETRY
    assert outcome_decision_from_json("SUCCEEDED") is OutcomeDecision.UNSPECIFIED


@pytest.mark.parametrize(
    ("event_type", "payload", "why"),
    [
        ("run.paused", "{}", "unknown event type"),
        (ev.RUN_WAITING, "{}", "unknown event type"),  # stream-only: never in a log
        (ev.TOOL_STARTED, "{not json", "JSONDecodeError"),
        (ev.TOOL_STARTED, "[1, 2]", "AttributeError"),
        (ev.MODEL_COMPLETED, '{"step": 1, "tool_calls": 5}', "TypeError"),
        (ev.STEP_STARTED, '{"step": "one"}', "ValueError"),
        (ev.RUN_ENDED, '{"reason": "r"}', "without a phase"),
        (ev.RUN_ENDED, '{"phase": "RUN_PHASE_UNSPECIFIED"}', "without a phase"),
        (ev.RUN_ENDED, '{"phase": ["RUN_PHASE_FAILED"]}', "without a phase"),
        (ev.VARIABLES_SET, '{"removed": "abc"}', "TypeError"),  # a text is no list of names
        (ev.RUN_ENDED, '{"phase": "RUN_PHASE_FAILED", "unknown_calls": "c1"}', "AttributeError"),
        (ev.TOOL_FAILED, '{"step": 1, "error": "TRANSIENT"}', "AttributeError"),
    ],
)
def test_a_payload_no_runtime_wrote_is_refused_as_undecodable(
    event_type: str, payload: str, why: str
) -> None:
    with pytest.raises(UndecodableEvent, match=why) as info:
        decode_event(event_type, payload)
    assert isinstance(info.value, UnreadableRecord)  # the API reports it as INTERNAL, like a sealed value
    assert info.value.reason == "EVENT_UNDECODABLE" and info.value.metadata["event_type"] == event_type


# -- the core's enums against the proto's ---------------------------------------------------------


def test_every_core_enum_member_has_its_proto_value_and_back() -> None:
    def wire(event: ev.Event, key: str) -> Any:
        return event_to_json(event)[key]

    phases = {wire(RunEnded(phase=p), "phase") for p in Phase}
    assert phases == set(run_pb2.RunPhase.keys()) - {"RUN_PHASE_UNSPECIFIED"}
    codes = {
        wire(ToolFailed(step=1, call_id="c", error=ToolError(c)), "error").get("code") for c in ToolErrorCode
    }
    assert codes == (set(tool_pb2.ToolErrorCode.keys()) - {"TOOL_ERROR_CODE_UNSPECIFIED"}) | {None}
    approvals = {wire(ApprovalResolved(approval_id="a", decision=d), "decision") for d in ApprovalDecision}
    assert approvals == set(run_pb2.ApprovalDecision.keys())
    outcomes = {wire(OutcomeResolved(call_id="c", decision=d), "decision") for d in OutcomeDecision}
    assert outcomes == set(runtime_service_pb2.OutcomeDecision.keys())
    kinds = {f"STEP_KIND_{wire(StepStarted(step=1, kind=k), 'kind').upper()}" for k in StepKind}
    assert kinds == set(run_pb2.StepKind.keys()) - {"STEP_KIND_UNSPECIFIED"}
