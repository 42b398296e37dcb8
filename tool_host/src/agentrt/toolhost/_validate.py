"""Bounded checks of what callers send a tool host (DESIGN R10.4).

JSON from a caller is parsed with a size and a depth bound: Python's parser recurses, so a
deeply nested text raises RecursionError (or passes, then breaks the next recursive consumer:
pydantic, canonical hashing, protobuf Struct). Ids and keys are bounded, visible ASCII.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentrt.toolhost._status import InvalidRequest

__all__ = [
    "MAX_ARGUMENTS_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_KEY_BYTES",
    "MAX_TOOL_NAME_BYTES",
    "JsonBoundsError",
    "bad_key",
    "check_field",
    "json_depth",
    "loads_bounded",
]

MAX_JSON_DEPTH = 64  # protobuf's Struct stops at 100; no tool needs this much
MAX_ARGUMENTS_BYTES = 2 * 1024 * 1024  # under the 4 MiB message cap, so the bound is ours
MAX_KEY_BYTES = 256  # idempotency keys, run and call ids in call metadata
MAX_TOOL_NAME_BYTES = 128
_KEY = re.compile(r"[\x21-\x7e]+")


class JsonBoundsError(ValueError):
    """Text that is not JSON, or JSON over a size or depth bound; the message quotes none of it."""


def json_depth(value: Any, *, limit: int) -> int:
    """Nesting depth of a parsed JSON value (a scalar is 0), counting no further than ``limit + 1``.

    Iterative, so it cannot itself overflow the stack.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth) for child in children)
    return deepest


def _reject_constant(name: str) -> Any:
    raise JsonBoundsError(f"{name} is not JSON")


def loads_bounded(text: str, *, max_bytes: int = MAX_ARGUMENTS_BYTES, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` refusing texts over ``max_bytes``, nesting over ``max_depth``, NaN and Infinity.

    Raises:
        JsonBoundsError: with a message that says which bound, never the text.
    """
    if len(text) > max_bytes or len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise JsonBoundsError(f"JSON is larger than {max_bytes} bytes")
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise JsonBoundsError(f"JSON is nested deeper than {max_depth} levels") from None
    except JsonBoundsError:
        raise
    except ValueError as exc:
        # JSONDecodeError's message holds a position, not the text.
        raise JsonBoundsError(f"not valid JSON: {str(exc)[:120]}") from None
    if json_depth(value, limit=max_depth) > max_depth:
        raise JsonBoundsError(f"JSON is nested deeper than {max_depth} levels")
    return value


def bad_key(value: str, *, max_bytes: int = MAX_KEY_BYTES) -> str | None:
    """Why ``value`` is not a usable key or id (too long, not visible ASCII), or None."""
    if len(value) > max_bytes or len(value.encode("utf-8", "surrogatepass")) > max_bytes:
        return f"longer than {max_bytes} bytes"
    if value and not _KEY.fullmatch(value):
        return "not visible ASCII (no spaces or control characters)"
    return None


def check_field(value: str, field: str, *, max_bytes: int = MAX_KEY_BYTES) -> None:
    """Refuse a key, id or tool name that is too long or not visible ASCII (quoting none of it).

    Raises:
        InvalidRequest: ``INVALID_FIELD`` with a BadRequest violation naming ``field``.
    """
    why = bad_key(value, max_bytes=max_bytes)
    if why is not None:
        raise InvalidRequest(f"{field} is {why}", reason="INVALID_FIELD", violations=[(field, why)])
