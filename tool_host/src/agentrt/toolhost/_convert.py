"""Conversions between the SDK's values and the ``agentrt.toolhost.v1`` messages."""

from __future__ import annotations

import json

from google.protobuf import duration_pb2, timestamp_pb2

from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.toolhost._errors import ErrorCode
from agentrt.toolhost._ledger import OperationRecord, OperationStatus
from agentrt.toolhost._outcome import Failure
from agentrt.toolhost._sdk import Intent, IntentScope, SideEffect, Tool

__all__ = [
    "ERROR_CODES",
    "INTENT_SCOPES",
    "OPERATION_STATUSES",
    "SIDE_EFFECTS",
    "failure_to_proto",
    "intent_to_proto",
    "operation_to_proto",
    "timestamp_ns",
    "tool_to_spec",
]

SIDE_EFFECTS: dict[SideEffect, tool_pb2.SideEffect] = {
    SideEffect.READ_ONLY: tool_pb2.SIDE_EFFECT_READ_ONLY,
    SideEffect.WRITE: tool_pb2.SIDE_EFFECT_WRITE,
    SideEffect.DESTRUCTIVE: tool_pb2.SIDE_EFFECT_DESTRUCTIVE,
}

INTENT_SCOPES: dict[IntentScope, tool_pb2.IntentScope] = {
    IntentScope.RUN: tool_pb2.INTENT_SCOPE_RUN,
    IntentScope.SESSION: tool_pb2.INTENT_SCOPE_SESSION,
    IntentScope.TENANT: tool_pb2.INTENT_SCOPE_TENANT,
}

ERROR_CODES: dict[ErrorCode, tool_pb2.ToolErrorCode] = {
    ErrorCode.INVALID_INPUT: tool_pb2.TOOL_ERROR_CODE_INVALID_INPUT,
    ErrorCode.UNAUTHORIZED: tool_pb2.TOOL_ERROR_CODE_UNAUTHORIZED,
    ErrorCode.TRANSIENT: tool_pb2.TOOL_ERROR_CODE_TRANSIENT,
    ErrorCode.PERMANENT: tool_pb2.TOOL_ERROR_CODE_PERMANENT,
    ErrorCode.CANCELLED: tool_pb2.TOOL_ERROR_CODE_CANCELLED,
    ErrorCode.UNKNOWN_TOOL: tool_pb2.TOOL_ERROR_CODE_UNKNOWN_TOOL,
    ErrorCode.KEY_CONFLICT: tool_pb2.TOOL_ERROR_CODE_KEY_CONFLICT,
    ErrorCode.FENCED: tool_pb2.TOOL_ERROR_CODE_FENCED,
    ErrorCode.NOT_ALLOWED: tool_pb2.TOOL_ERROR_CODE_NOT_ALLOWED,
    ErrorCode.RESULT_TOO_LARGE: tool_pb2.TOOL_ERROR_CODE_RESULT_TOO_LARGE,
}

OPERATION_STATUSES: dict[OperationStatus, tool_pb2.OperationStatus] = {
    OperationStatus.RUNNING: tool_pb2.OPERATION_STATUS_RUNNING,
    OperationStatus.SUCCEEDED: tool_pb2.OPERATION_STATUS_SUCCEEDED,
    OperationStatus.FAILED: tool_pb2.OPERATION_STATUS_FAILED,
}


def tool_to_spec(tool: Tool) -> tool_pb2.ToolSpec:
    """Return the ``ToolSpec`` a host lists for ``tool``."""
    timeout = duration_pb2.Duration()
    timeout.FromNanoseconds(round(tool.timeout * 1e9))
    return tool_pb2.ToolSpec(
        name=tool.name,
        version=tool.version,
        description=tool.description,
        input_schema_json=json.dumps(tool.input_schema(), sort_keys=True),
        side_effect=SIDE_EFFECTS[tool.side_effect],
        idempotent=tool.idempotent,
        supports_query=bool(tool.supports_query),
        concurrency_safe=tool.concurrency_safe,
        requires_approval=tool.requires_approval,
        default_timeout=timeout,
        max_concurrent_calls=tool.max_concurrent_calls,
        intent_key=intent_to_proto(tool.intent) if tool.intent is not None else None,
    )


def intent_to_proto(intent: Intent) -> tool_pb2.IntentKey:
    """Return the ``IntentKey`` a tool's spec lists."""
    key = tool_pb2.IntentKey(arguments=list(intent.arguments), scope=INTENT_SCOPES[intent.scope])
    if intent.window is not None:
        key.window.FromNanoseconds(round(intent.window * 1e9))
    return key


def failure_to_proto(failure: Failure) -> tool_pb2.ToolError:
    """Return the ``ToolError`` message of a failure."""
    return tool_pb2.ToolError(
        code=ERROR_CODES[failure.code], message=failure.message, details_json=failure.details_json
    )


def timestamp_ns(ns: int) -> timestamp_pb2.Timestamp:
    """Return the ``Timestamp`` of epoch nanoseconds."""
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(ns)
    return stamp


def operation_to_proto(record: OperationRecord) -> tool_pb2.Operation:
    """Return the ``Operation`` message of a ledger entry."""
    operation = tool_pb2.Operation(
        idempotency_key=record.idempotency_key,
        tool=record.tool,
        input_hash=record.input_hash,
        status=OPERATION_STATUSES[record.status],
        run_id=record.run_id,
        create_time=timestamp_ns(record.create_time_ns),
        update_time=timestamp_ns(record.update_time_ns),
    )
    if record.outcome is not None:
        if record.outcome.result_json is not None:
            operation.result_json = record.outcome.result_json
        if record.outcome.failure is not None:
            operation.error.CopyFrom(failure_to_proto(record.outcome.failure))
    return operation
