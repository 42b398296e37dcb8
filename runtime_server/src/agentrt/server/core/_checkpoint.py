"""Checkpoints (R5.1, R5.6): a run's folded state, written every N events, read back on resume.

A checkpoint is a cache of the log: the state after the events up to ``through_seq``, so that a
resume folds only the tail. It is never the truth. Whenever one cannot be used (corrupted, of
another run or agent snapshot, of a newer state version, or of an older one no upgrader leads
from) :func:`restore` raises :class:`CheckpointUnusable` and the caller replays the whole log.

The stored text is a JSON envelope::

    {"format": 1, "run_id": ..., "through_seq": ..., "runtime_version": ..., "agent_config_hash": ...,
     "sha256": <of the canonical state JSON>, "state": {...}}

and the row records ``state_version`` (``core._upgrade.STATE_VERSION`` when written). The state is
encoded generically from the dataclasses' field types, so a field added to :class:`RunState` (or
to a value it holds) is checkpointed without touching this module; a field this runtime does not
know makes the checkpoint unusable rather than silently dropped.

A state version bump that changes the state's shape registers a checkpoint upgrader in
:data:`CHECKPOINT_UPGRADERS` (``v -> v + 1`` on the state JSON), next to the event upgraders of
``core._upgrade``; without one, older checkpoints are ignored and the log replayed.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import types
import typing
from collections import Counter
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from agentrt.server.core._errors import AgentRtError
from agentrt.server.core._state import RunState
from agentrt.server.core._upgrade import STATE_VERSION

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_UPGRADERS",
    "CheckpointUnusable",
    "checkpoint_text",
    "restore",
]

#: Layout of the envelope; a change that older runtimes cannot read bumps it.
CHECKPOINT_FORMAT = 1

#: state version -> the state JSON of a checkpoint of that version in the shape of the next one.
CHECKPOINT_UPGRADERS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


class CheckpointUnusable(AgentRtError):
    """The checkpoint cannot stand for the log's prefix: replay the whole log instead."""

    reason = "checkpoint_unusable"


def checkpoint_text(state: RunState, *, runtime_version: str, agent_config_hash: str) -> str:
    """The stored text of a checkpoint of ``state`` (covering its first ``state.seq`` events).

    A hydrated input (the whole text of an input payload) is stored as the view the log holds: the
    checkpoint stays small and equals a replay; the resume hydrates it again.
    """
    data = _encode(state)
    if state.input_ref is not None:
        data["input"] = state.input_view
        if 0 <= state.input_index < len(data["history"]):
            data["history"][state.input_index]["content"] = state.input_view
    body = _canonical(data)
    envelope = {
        "format": CHECKPOINT_FORMAT,
        "run_id": state.run_id,
        "through_seq": state.seq,
        "runtime_version": runtime_version,
        "agent_config_hash": agent_config_hash,
        "sha256": hashlib.sha256(body.encode()).hexdigest(),
        "state": data,
    }
    return json.dumps(envelope, separators=(",", ":"), ensure_ascii=False)


def restore(
    text: str, *, state_version: int, run_id: str, through_seq: int, agent_config_hash: str
) -> RunState:
    """The state a checkpoint holds, after the upgraders from its state version to this runtime's.

    Raises:
        CheckpointUnusable: the checkpoint does not decode, fails its checksum, belongs to another
            run, position or agent snapshot, or has a state version no upgrader leads from.
    """
    if state_version > STATE_VERSION:
        raise CheckpointUnusable(f"checkpoint state version {state_version} is newer than {STATE_VERSION}")
    try:
        envelope = json.loads(text)
        data = envelope["state"]
        if envelope["format"] != CHECKPOINT_FORMAT:
            raise CheckpointUnusable(f"checkpoint format {envelope['format']!r} is not {CHECKPOINT_FORMAT}")
        if hashlib.sha256(_canonical(data).encode()).hexdigest() != envelope["sha256"]:
            raise CheckpointUnusable("checkpoint checksum does not match its state")
        expected = (run_id, through_seq, agent_config_hash)
        found = (envelope["run_id"], envelope["through_seq"], envelope["agent_config_hash"])
        if found != expected:
            raise CheckpointUnusable(f"checkpoint is of {found}, not {expected}")
        for version in range(state_version, STATE_VERSION):
            upgrader = CHECKPOINT_UPGRADERS.get(version)
            if upgrader is None:
                raise CheckpointUnusable(f"no checkpoint upgrader from state version {version}")
            data = upgrader(data)
        state: RunState = _decode(RunState, data)
    except CheckpointUnusable:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        why = f"{type(exc).__name__}: {str(exc)[:200]}"
        raise CheckpointUnusable(f"checkpoint does not decode: {why}") from None
    if state.seq != through_seq:
        raise CheckpointUnusable(f"checkpoint state is at seq {state.seq}, not {through_seq}")
    return state


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# -- generic encoding from the dataclasses' field types ------------------------------------------------


def _encode(value: Any) -> Any:
    if isinstance(value, enum.Enum):  # before str: a StrEnum is a str
        return value.value
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        return sorted(_encode(v) for v in value)
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    raise TypeError(f"cannot checkpoint a {type(value).__name__}")


def _hints(cls: type[Any]) -> dict[str, Any]:
    return typing.get_type_hints(cls)  # once per class: _decoder caches what is built from it


def _decode(tp: Any, data: Any) -> Any:
    return _decoder(tp)(data)


@cache
def _decoder(tp: Any) -> Callable[[Any], Any]:
    """A function that restores a value of type ``tp`` from its JSON; made once per type."""
    if tp is Any:
        return lambda data: data
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        choices = [t for t in args if t is not type(None)]
        if len(choices) > 1 and all(t in (str, int, bool, float) for t in choices):
            return _scalar_union_decoder(tuple(choices), optional=type(None) in args)
        (inner,) = choices
        decode_inner = _decoder(inner)
        optional = type(None) in args
        return lambda data: None if data is None and optional else decode_inner(data)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass_decoder(tp)
    if tp in (str, int, bool, float):
        return _scalar_decoder(tp)
    if origin in (list, set, frozenset):
        item = _decoder(args[0])
        return lambda data: origin(item(v) for v in _list(data))
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = _decoder(args[0])
            return lambda data: tuple(item(v) for v in _list(data))
        items = [_decoder(t) for t in args]

        def fixed(data: Any) -> tuple[Any, ...]:
            values = _list(data)
            if len(values) != len(items):
                raise ValueError(f"expected {len(items)} items for {tp}")
            return tuple(d(v) for d, v in zip(items, values, strict=True))

        return fixed
    if origin is Counter:  # Counter[K]: the counts are ints
        key, count = _decoder(args[0]), _decoder(int)
        return lambda data: Counter({key(k): count(v) for k, v in _dict(data).items()})
    if origin in (dict, Mapping):
        key, value = _decoder(args[0]), _decoder(args[1])
        return lambda data: {key(k): value(v) for k, v in _dict(data).items()}
    raise TypeError(f"cannot restore a field of type {tp!r}")


def _dataclass_decoder(cls: type[Any]) -> Callable[[Any], Any]:
    hints = _hints(cls)
    fields = {f.name: _decoder(hints[f.name]) for f in dataclasses.fields(cls)}

    def decode(data: Any) -> Any:
        values = _dict(data)
        unknown = values.keys() - fields.keys()
        if unknown:
            raise ValueError(f"{cls.__name__} has no fields {sorted(unknown)}")
        return cls(**{name: fields[name](value) for name, value in values.items()})

    return decode


def _scalar_decoder(tp: type[Any]) -> Callable[[Any], Any]:
    def decode(data: Any) -> Any:
        if type(data) is tp or (tp is float and type(data) is int):
            return data
        raise TypeError(f"expected {tp.__name__}, got {type(data).__name__}")

    return decode


def _scalar_union_decoder(choices: tuple[type[Any], ...], *, optional: bool) -> Callable[[Any], Any]:
    """A value of one of the scalar types (e.g. a run variable: str | float | bool), as it is."""

    def decode(data: Any) -> Any:
        if data is None and optional:
            return None
        if type(data) in choices or (float in choices and type(data) is int):
            return data
        raise TypeError(f"expected one of {[t.__name__ for t in choices]}, got {type(data).__name__}")

    return decode


def _list(data: Any) -> list[Any]:
    if not isinstance(data, list):
        raise TypeError(f"expected a list, got {type(data).__name__}")
    return data


def _dict(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise TypeError(f"expected an object, got {type(data).__name__}")
    return data
