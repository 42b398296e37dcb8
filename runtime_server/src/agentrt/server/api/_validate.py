"""Pure checks of request fields at the edge of the runtime API (DESIGN R10.4).

Every check raises :class:`InvalidRequest` naming the field, with a message that never quotes
the caller's value beyond a short, bounded prefix: a 5,000-character id must not come back in a
status (gRPC trailers have a size limit, and logs and clients should not carry it either).
The servicer calls these before any lookup or write, so a rejected request changes nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from google.protobuf import duration_pb2, struct_pb2

from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2
from agentrt.server.config import LimitsConfig
from agentrt.server.core import InvalidRequest, PayloadTooLarge
from agentrt.toolhost import MAX_JSON_DEPTH, JsonBoundsError, loads_bounded

__all__ = [
    "MAX_AGENT_NAMES",
    "MAX_BUDGET_COUNT",
    "MAX_COST_MICROS",
    "MAX_INSTRUCTIONS_BYTES",
    "MAX_OPTIONS_BYTES",
    "MAX_PER_TOOL_ENTRIES",
    "MAX_TOKENS",
    "check_budgets",
    "check_enum",
    "check_id",
    "check_json",
    "check_metadata",
    "check_start",
    "check_text",
    "quote",
]

# Visible ASCII: no spaces, control characters or non-ASCII look-alikes in ids and keys.
_ID = re.compile(r"[\x21-\x7e]+")
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
MAX_BUDGET_COUNT = 1_000_000  # int32 budgets: steps, calls, handoffs, parallel calls
MAX_TOKENS = 2**53 - 1  # exact in a JSON number, so a stored budget reads back the same
MAX_COST_MICROS = 10**15  # US$1e9; exact in a JSON number and in a float of dollars
MAX_PER_TOOL_ENTRIES = 256
MAX_OPTIONS_BYTES = 64 * 1024
MAX_INSTRUCTIONS_BYTES = 256 * 1024
MAX_AGENT_NAMES = 256
_MAX_DURATION_S = 315_576_000_000  # google.protobuf.Duration's own range


def quote(value: str, limit: int = 40) -> str:
    """A short, safe rendering of caller input for a message: at most ``limit`` characters."""
    shown = value[:limit]
    return repr(shown) + ("..." if len(value) > limit else "")


def check_id(value: str, field: str, *, max_bytes: int, required: bool = True) -> str:
    """An id or key: at most ``max_bytes`` bytes of visible ASCII. Returns it unchanged."""
    if not value:
        if required:
            raise InvalidRequest(f"{field} is required", field=field)
        return value
    if len(value) > max_bytes or len(value.encode()) > max_bytes:
        raise InvalidRequest(f"{field} is longer than {max_bytes} bytes", field=field, reason="ID_TOO_LONG")
    if not _ID.fullmatch(value):
        raise InvalidRequest(
            f"{field} may hold only visible ASCII characters (no spaces or control characters)",
            field=field,
            reason="INVALID_ID",
        )
    return value


def check_text(value: str, field: str, *, max_bytes: int) -> str:
    """Free text (an input, a comment, a reason): bounded in bytes, no NUL character.

    PostgreSQL text cannot hold NUL: a value with one would fail at the insert (as INTERNAL) on
    one backend and be stored on the other.
    """
    if len(value) > max_bytes or len(value.encode()) > max_bytes:
        raise PayloadTooLarge(f"{field} is longer than {max_bytes} bytes", field=field)
    if "\x00" in value:
        raise InvalidRequest(f"{field} contains a NUL character", field=field, reason="NUL_CHARACTER")
    return value


def check_enum(value: int, field: str, enum: type, *, allow_unspecified: bool = False) -> int:
    """A known, and unless allowed non-zero, value of a proto enum (a wrapper class from _pb2)."""
    known: list[int] = list(enum.values())  # type: ignore[attr-defined]
    if value not in known:
        raise InvalidRequest(f"{field} is not a known value ({value})", field=field, reason="UNKNOWN_ENUM")
    if value == 0 and not allow_unspecified:
        raise InvalidRequest(f"{field} is required", field=field)
    return value


def check_json(text: str, field: str, *, max_bytes: int) -> None:
    """Empty, or JSON within ``max_bytes`` and the depth bound (no NaN or Infinity)."""
    if not text:
        return
    try:
        loads_bounded(text, max_bytes=max_bytes)
    except JsonBoundsError as exc:
        raise InvalidRequest(f"{field}: {exc}", field=field) from None


def check_metadata(metadata: Mapping[str, str], field: str, *, limits: LimitsConfig) -> None:
    """Bounded in entries and in total bytes of keys and values; keys are short and visible."""
    if len(metadata) > limits.max_metadata_entries:
        raise InvalidRequest(f"at most {limits.max_metadata_entries} {field} entries", field=field)
    total = 0
    for key, value in metadata.items():
        if not key or len(key) > 256 or not _ID.fullmatch(key):
            raise InvalidRequest(
                f"{field} keys are 1-256 visible ASCII characters", field=field, reason="INVALID_METADATA"
            )
        total += len(key.encode()) + len(value.encode())
        if total > limits.max_metadata_bytes:
            raise PayloadTooLarge(
                f"{field} is over {limits.max_metadata_bytes} bytes in total",
                field=field,
                metadata={"limit": str(limits.max_metadata_bytes)},
            )


def _count(value: int, field: str, ceiling: int) -> None:
    if not 0 <= value <= ceiling:
        raise InvalidRequest(
            f"{field} must be within 0..{ceiling}", field=field, reason="BUDGET_OUT_OF_RANGE"
        )


def _duration(value: duration_pb2.Duration, field: str, *, max_s: float) -> None:
    seconds, nanos = value.seconds, value.nanos
    if (
        not -_MAX_DURATION_S <= seconds <= _MAX_DURATION_S
        or not -999_999_999 <= nanos <= 999_999_999
        or (seconds > 0 and nanos < 0)
        or (seconds < 0 and nanos > 0)
    ):
        raise InvalidRequest(f"{field} is not a valid duration", field=field, reason="BUDGET_OUT_OF_RANGE")
    total = seconds + nanos / 1e9
    if not 0 <= total <= max_s:
        raise InvalidRequest(f"{field} must be within 0..{max_s}s", field=field, reason="BUDGET_OUT_OF_RANGE")


def check_budgets(budgets: run_pb2.Budgets, field: str, *, limits: LimitsConfig) -> None:
    """Every budget finite, not negative and in range, including each per-tool entry.

    The server's ceilings on steps, calls and timeout are applied later to the effective
    budgets (``effective_budgets``); these are the bounds no value may pass whatever the config.
    """
    for name in ("max_model_steps", "max_tool_calls", "max_handoffs", "max_parallel_tool_calls"):
        _count(getattr(budgets, name), f"{field}.{name}", MAX_BUDGET_COUNT)
    for name in ("max_input_tokens", "max_output_tokens"):
        _count(getattr(budgets, name), f"{field}.{name}", MAX_TOKENS)
    _count(budgets.max_cost_micros, f"{field}.max_cost_micros", MAX_COST_MICROS)
    per_tool = budgets.max_calls_per_tool
    if len(per_tool) > MAX_PER_TOOL_ENTRIES:
        raise InvalidRequest(
            f"{field}.max_calls_per_tool has more than {MAX_PER_TOOL_ENTRIES} entries",
            field=f"{field}.max_calls_per_tool",
        )
    for tool, limit in per_tool.items():
        if not _TOOL_NAME.fullmatch(tool):
            raise InvalidRequest(
                f"{field}.max_calls_per_tool names a tool that is not a valid tool name: {quote(tool)}",
                field=f"{field}.max_calls_per_tool",
                reason="INVALID_TOOL_NAME",
            )
        _count(limit, f"{field}.max_calls_per_tool[{tool}]", MAX_BUDGET_COUNT)
    if budgets.HasField("timeout"):
        _duration(budgets.timeout, f"{field}.timeout", max_s=limits.max_timeout_s)


def _check_options(options: struct_pb2.Struct, field: str) -> None:
    """Model options: bounded in size and depth, every number finite (iteratively, no recursion)."""
    if options.ByteSize() > MAX_OPTIONS_BYTES:
        raise PayloadTooLarge(f"{field} is over {MAX_OPTIONS_BYTES} bytes", field=field)
    stack: list[tuple[struct_pb2.Value, int]] = [(v, 1) for v in options.fields.values()]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise InvalidRequest(f"{field} is nested deeper than {MAX_JSON_DEPTH}", field=field)
        kind = value.WhichOneof("kind")
        if kind == "number_value" and not math.isfinite(value.number_value):
            raise InvalidRequest(f"{field} holds a number that is not finite", field=field)
        if kind == "struct_value":
            stack.extend((v, depth + 1) for v in value.struct_value.fields.values())
        elif kind == "list_value":
            stack.extend((v, depth + 1) for v in value.list_value.values)


def _check_agent_spec(spec: run_pb2.AgentSpec, *, limits: LimitsConfig) -> None:
    if spec.name:
        check_id(spec.name, "agent.name", max_bytes=limits.max_id_bytes)
    check_text(spec.instructions, "agent.instructions", max_bytes=MAX_INSTRUCTIONS_BYTES)
    for name in ("tools", "handoffs", "agent_tools"):
        if len(getattr(spec, name)) > MAX_AGENT_NAMES:
            raise InvalidRequest(
                f"agent.{name} has more than {MAX_AGENT_NAMES} entries", field=f"agent.{name}"
            )
    check_budgets(spec.budgets, "agent.budgets", limits=limits)
    _check_options(spec.model.options, "agent.model.options")


def check_start(
    request: runtime_service_pb2.RunAgentRequest | runtime_service_pb2.StartRunRequest,
    *,
    limits: LimitsConfig,
) -> None:
    """The fields of RunAgent / StartRun that need no lookup: ids, enums, numbers, metadata."""
    max_id = limits.max_id_bytes
    check_id(request.request_key, "request_key", max_bytes=max_id, required=False)
    check_id(request.session_id, "session_id", max_bytes=max_id, required=False)
    check_id(request.agent_name, "agent_name", max_bytes=max_id, required=False)
    check_enum(
        request.session_policy, "session_policy", runtime_service_pb2.SessionPolicy, allow_unspecified=True
    )
    check_budgets(request.budgets, "budgets", limits=limits)
    if request.HasField("agent"):
        _check_agent_spec(request.agent, limits=limits)
    check_metadata(request.metadata, "metadata", limits=limits)
    if "\x00" in request.input:
        raise InvalidRequest("input contains a NUL character", field="input", reason="NUL_CHARACTER")
