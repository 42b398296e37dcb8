"""Samples of every core event, derived from the dataclass fields (for the event codec's tests).

``event_strategy(cls)`` builds a hypothesis strategy for an event class from its fields' types,
recursing into the value classes it carries; a field of a type this module does not know fails
loudly, so a new event or field is covered (or refused) without anyone writing a strategy.
A few value classes hold more than their types say (a call summary has an error code or a
detail, never both; budgets keep milliseconds; per-tool counts never reach an event): those get
a strategy of their own below.

``to_plain`` / ``from_plain`` write an event as plain JSON and back without the codec (field by
field, by type), for the golden payloads of tests/fixtures/event_codec/. Regenerate nothing:
``python -m tests.unit._event_samples`` only appends samples of event types the file lacks,
encoded by the codec of the tree it runs in.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from collections.abc import Mapping
from enum import Enum
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from agentrt.server.core import Budgets, CallSummary, ToolErrorCode, Usage
from agentrt.server.core import events as ev

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "event_codec" / "golden.jsonl"
SAMPLES_PER_TYPE = 24

text = st.text(max_size=12)
count = st.integers(min_value=0, max_value=2**63 - 1)
small = st.integers(min_value=0, max_value=2**31 - 1)
_variable_value = (
    text | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False)
)

# Value classes whose fields say less than what they may hold.
_SPECIAL: dict[Any, st.SearchStrategy[Any]] = {
    Usage: st.builds(
        Usage,
        model_steps=small,
        tool_calls=small,
        input_tokens=count,
        output_tokens=count,
        cost_micros=count,
        handoffs=small,
        calls_per_tool=st.just({}),  # per-tool counts stay internal: events never carry them
    ),
    Budgets: st.builds(
        Budgets,
        max_model_steps=small,
        max_tool_calls=small,
        max_calls_per_tool=st.dictionaries(text, small, max_size=2),
        timeout_s=st.integers(0, 10**9).map(lambda ms: ms / 1000),  # stored with millisecond precision
        max_input_tokens=count,
        max_output_tokens=count,
        max_cost_micros=count,
        max_handoffs=small,
        max_parallel_tool_calls=small,
    ),
    # One text on the wire: a failed call's error code, or else why it is listed.
    CallSummary: st.builds(
        CallSummary, call_id=text, tool=text, step=small, error=st.sampled_from(ToolErrorCode)
    )
    | st.builds(
        CallSummary,
        call_id=text,
        tool=text,
        step=small,
        detail=st.sampled_from(["", "not_started", "no_outcome"]),
    ),
    ev.VariableValue: _variable_value,
}
# Fields whose type admits values the runtime never writes and the log cannot tell apart.
_FIELDS: dict[tuple[type[Any], str], st.SearchStrategy[Any]] = {
    # An empty sampling record is no record: it is left out and reads back as None.
    (ev.ModelCompleted, "sampling"): st.none()
    | st.dictionaries(
        st.sampled_from(["temperature", "top_p", "max_tokens", "seed"]),
        st.integers(0, 100) | st.just(0.5),
        min_size=1,
    ),
}


def _args(tp: Any) -> tuple[Any, ...]:
    return typing.get_args(tp)


def _optional_of(tp: Any) -> Any | None:
    """``X`` for a hint ``X | None``, else None."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        rest = [a for a in _args(tp) if a is not type(None)]
        if len(rest) == 1 and len(rest) < len(_args(tp)):
            return rest[0]
    return None


@cache
def _hints(cls: type[Any]) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _fields(cls: type[Any]) -> list[tuple[str, Any]]:
    hints = _hints(cls)
    return [(f.name, hints[f.name]) for f in dataclasses.fields(cls) if f.init]


def strategy_for(tp: Any) -> st.SearchStrategy[Any]:
    """A strategy for values of the field type ``tp``; TypeError for a type this module does not know."""
    if tp in _SPECIAL:
        return _SPECIAL[tp]
    inner = _optional_of(tp)
    if inner is not None:
        return st.none() | strategy_for(inner)
    origin = typing.get_origin(tp)
    if origin is tuple and len(_args(tp)) == 2 and _args(tp)[1] is Ellipsis:
        return st.lists(strategy_for(_args(tp)[0]), max_size=3).map(tuple)
    if origin in (Mapping, dict) and _args(tp)[0] is str:
        value = _args(tp)[1]
        values = _variable_value if value is Any else strategy_for(value)
        return st.dictionaries(text, values, max_size=3)
    if tp is str:
        return text
    if tp is bool:
        return st.booleans()
    if tp is int:
        return count
    if isinstance(tp, type) and issubclass(tp, Enum):
        return st.sampled_from(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return dataclass_strategy(tp)
    raise TypeError(f"no sample strategy for the field type {tp!r}")


def dataclass_strategy(cls: type[Any]) -> st.SearchStrategy[Any]:
    """Instances of ``cls`` with every field drawn from its type (or from ``_FIELDS``)."""
    drawn = {
        name: _FIELDS[cls, name] if (cls, name) in _FIELDS else strategy_for(tp) for name, tp in _fields(cls)
    }
    return st.builds(cls, **drawn)


def event_strategy(cls: type[Any]) -> st.SearchStrategy[Any]:
    return dataclass_strategy(cls)


def any_event() -> st.SearchStrategy[Any]:
    """Any event of any class core lists (``events.EVENT_CLASSES``)."""
    return st.one_of(*(event_strategy(cls) for cls in ev.EVENT_CLASSES.values()))


# -- plain JSON of an event, by its fields (independent of the codec) -----------------------------


def to_plain(value: Any) -> Any:
    """``value`` as plain JSON: a dataclass as an object of its fields, an enum by name, a tuple as a list."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, tuple | list):
        return [to_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: to_plain(v) for k, v in value.items()}
    return value


def from_plain(tp: Any, data: Any) -> Any:
    """Inverse of :func:`to_plain` for a value of type ``tp``."""
    inner = _optional_of(tp)
    if inner is not None:
        return None if data is None else from_plain(inner, data)
    origin = typing.get_origin(tp)
    if origin is tuple:
        return tuple(from_plain(_args(tp)[0], v) for v in data)
    if isinstance(tp, type) and issubclass(tp, Enum):
        return tp[data]
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return tp(**{name: from_plain(ftp, data[name]) for name, ftp in _fields(tp) if name in data})
    if origin in (Mapping, dict):
        return dict(data)
    return data


def event_from_plain(type_name: str, data: Mapping[str, Any]) -> Any:
    return from_plain(ev.EVENT_CLASSES[type_name], data)


# -- the golden file --------------------------------------------------------------------------------


def read_golden(path: Path = GOLDEN) -> list[dict[str, Any]]:
    """Each line: ``{"type": ..., "event": <plain JSON>, "payload": <the stored text, verbatim>}``."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line]


def _samples(cls: type[Any], n: int) -> list[Any]:
    found: list[Any] = []

    @settings(
        max_examples=n,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(event_strategy(cls))
    def collect(event: Any) -> None:
        found.append(event)

    collect()
    return found


def append_missing(path: Path = GOLDEN) -> int:
    """Append samples of every event type ``path`` lacks, encoded by this tree's codec; returns how many."""
    from agentrt.server.store import encode_event

    have = {line["type"] for line in read_golden(path)}
    lines: list[str] = []
    for type_name, cls in ev.EVENT_CLASSES.items():
        if type_name in have:
            continue
        seen: set[str] = set()
        # The simplest instance (every field at its least value, options absent) comes first.
        simplest = find(event_strategy(cls), lambda _: True, settings=settings(database=None))
        for event in [simplest, *_samples(cls, SAMPLES_PER_TYPE)]:
            stored_type, payload = encode_event(event)
            if payload in seen:
                continue
            seen.add(payload)
            record = {"type": stored_type, "event": to_plain(event), "payload": payload}
            lines.append(json.dumps(record))  # ASCII: no line separator inside a record
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as out:
        out.writelines(line + "\n" for line in lines)
    return len(lines)


if __name__ == "__main__":
    added = append_missing(Path(sys.argv[1]) if len(sys.argv) > 1 else GOLDEN)
    print(f"appended {added} samples")
