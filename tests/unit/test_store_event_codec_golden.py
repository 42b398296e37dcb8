"""The event codec writes what it has always written, byte for byte, for samples of every event type.

tests/fixtures/event_codec/golden.jsonl holds events drawn by hypothesis from their dataclass
fields (tests/unit/_event_samples.py), each with the payload the codec wrote for it; the first
696 lines were written by the hand-written codec, before it became one derivation (issue 16).
Every sample must still encode to its exact bytes, and those bytes must decode to the sample.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any

import pytest

from agentrt.server.core import events as ev
from agentrt.server.store import decode_event, encode_event
from tests.unit._event_samples import GOLDEN, event_from_plain, read_golden, to_plain

_LINES = read_golden()


def _defaults(type_name: str, fields: dict[str, Any]) -> dict[str, Any]:
    """The plain defaults of the fields of ``type_name`` named in ``fields``."""
    defaults = {f.name: f for f in dataclasses.fields(ev.EVENT_CLASSES[type_name])}
    out: dict[str, Any] = {}
    for name in fields:
        field = defaults[name]
        value = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
        out[name] = to_plain(value)
    return out


_BY_TYPE: dict[str, list[dict[str, Any]]] = defaultdict(list)
for _line in _LINES:
    _BY_TYPE[_line["type"]].append(_line)


def test_every_event_type_has_golden_samples() -> None:
    missing = set(ev.EVENT_CLASSES) - set(_BY_TYPE)
    assert not missing, f"no golden samples of {sorted(missing)}: run python -m tests.unit._event_samples"
    assert set(_BY_TYPE) <= set(ev.EVENT_CLASSES)  # a type the log no longer reads is a stored-shape break
    assert all(len(lines) >= 10 for lines in _BY_TYPE.values())


@pytest.mark.parametrize("type_name", sorted(_BY_TYPE))
def test_each_sample_encodes_to_its_golden_bytes_and_decodes_back(type_name: str) -> None:
    for number, line in enumerate(_BY_TYPE[type_name]):
        event = event_from_plain(type_name, line["event"])
        plain = to_plain(event)
        # A field added after the sample was written reads as its default: the sample's bytes hold.
        added = {k: v for k, v in plain.items() if k not in line["event"]}
        assert {k: v for k, v in plain.items() if k in line["event"]} == line["event"], (
            f"sample {number}: the fixture's reader is lossy"
        )
        assert added == _defaults(type_name, added), f"sample {number}: a new field is not at its default"
        assert encode_event(event) == (type_name, line["payload"]), f"sample {number} of {GOLDEN.name}"
        assert decode_event(type_name, line["payload"]) == event, f"sample {number} of {GOLDEN.name}"
