"""JSON from models and tools, parsed with depth and size bounds (R10.4, invariant 8).

``json.loads`` recurses once per nesting level: a model's tool call nested a few
thousand levels deep raised ``RecursionError`` wherever it was parsed (the loop
tracker, the approval hash, the guardrails) and crashed the run's driver on every
reclaim. Here the nesting is measured on the text first, without recursion, so a
violation is a typed :class:`JsonBoundsError` (a ``ValueError``) the caller turns
into an INVALID_INPUT tool error or a tool error, never a crash.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

__all__ = [
    "DEFAULT_JSON_LIMITS",
    "RESULT_JSON_LIMITS",
    "JsonBoundsError",
    "JsonLimits",
    "loads_bounded",
    "nesting_depth",
    "object_with_members",
]

MiB = 1024 * 1024

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # a string token, escapes included
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


@dataclass(frozen=True, slots=True)
class JsonLimits:
    """How deep and how large a JSON text may be."""

    max_depth: int = 64
    max_bytes: int = 8 * MiB


DEFAULT_JSON_LIMITS = JsonLimits()  # a model's tool call arguments
RESULT_JSON_LIMITS = JsonLimits(max_bytes=64 * MiB)  # a tool's result (payloads bound it more tightly)


class JsonBoundsError(ValueError):
    """A JSON text is not JSON, nests too deeply or is too large.

    ``reason`` is ``invalid``, ``too_deep`` or ``too_large``; the message never quotes the text.
    """

    def __init__(self, message: str, *, reason: str):
        super().__init__(message)
        self.reason = reason


def _reject_constant(name: str) -> Any:
    raise JsonBoundsError(f"{name} is not a JSON value", reason="invalid")


# Built once: json.loads with a keyword argument builds a new decoder on every call.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def nesting_depth(text: str, *, stop_at: int) -> int:
    """The deepest bracket nesting of ``text`` outside strings (exact once above ``stop_at``).

    Strings and everything but brackets are dropped by regex, then the running depth is
    summed by C-level iterators: no recursion and no per-character Python loop.
    """
    if text.count("[") + text.count("{") <= stop_at:
        return 0  # too few brackets to go past the bound: skip the scan
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def loads_bounded(text: str | bytes, limits: JsonLimits = DEFAULT_JSON_LIMITS) -> Any:
    """Parse standard JSON no deeper than ``limits.max_depth`` and no larger than ``limits.max_bytes``.

    NaN and Infinity are refused (they are not JSON and other parsers reject them).

    Raises:
        JsonBoundsError: the text violates a bound or is not JSON.
    """
    if isinstance(text, bytes | bytearray):
        if len(text) > limits.max_bytes:
            raise JsonBoundsError(_too_large(len(text), limits), reason="too_large")
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            raise JsonBoundsError("JSON text is not UTF-8", reason="invalid") from None
    elif len(text) > limits.max_bytes or (
        len(text) * 4 > limits.max_bytes and len(text.encode("utf-8", "surrogatepass")) > limits.max_bytes
    ):
        raise JsonBoundsError(_too_large(len(text), limits), reason="too_large")
    if nesting_depth(text, stop_at=limits.max_depth) > limits.max_depth:
        raise JsonBoundsError(f"JSON nests deeper than {limits.max_depth} levels", reason="too_deep")
    try:
        return _DECODER.decode(text)
    except JsonBoundsError:
        raise
    except RecursionError:  # defence in depth: the scan above should have caught it
        raise JsonBoundsError(
            f"JSON nests deeper than {limits.max_depth} levels", reason="too_deep"
        ) from None
    except ValueError as exc:
        where = f" at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise JsonBoundsError(f"not valid JSON{where}", reason="invalid") from None


def object_with_members(
    text: str, names: Sequence[str], limits: JsonLimits = DEFAULT_JSON_LIMITS
) -> dict[str, Any] | None:
    """``text`` parsed, when it is a JSON object with at least one of the members ``names``; else None.

    For the reserved members of a tool result (``_set_variables``, ``_cleanup``): the usual
    result names none of them and is not parsed at all; text that is not bounded JSON is None.
    """
    if not any(name in text for name in names):
        return None
    try:
        value = loads_bounded(text, limits)
    except ValueError:
        return None
    if not isinstance(value, dict) or not any(name in value for name in names):
        return None
    return value


def _too_large(size: int, limits: JsonLimits) -> str:
    return f"JSON text of at least {size} bytes exceeds the limit of {limits.max_bytes} bytes"
