"""The derivation behind the event codec (store/_derived_json.py), on classes of the test's own.

The events themselves are covered by tests/unit/test_store_event_codec.py and the golden
payloads; here: what the table can say, and that it refuses, at derivation, what it cannot do.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import pytest

from agentrt.proto.runtime.v1 import run_pb2
from agentrt.server.core import Usage
from agentrt.server.core import events as ev
from agentrt.server.store import _event_codec
from agentrt.server.store._derived_json import OMIT_DEFAULT, Derivation, EnumWire, Rule


class Colour(StrEnum):
    UNSPECIFIED = "UNSPECIFIED"
    RED = "RED"


class Mood(StrEnum):  # no UNSPECIFIED: a value must be given
    CALM = "CALM"
    CROSS = "CROSS"


_ENUMS = {
    Colour: EnumWire(
        {Colour.UNSPECIFIED: "COLOUR_UNSPECIFIED", Colour.RED: "COLOUR_RED"},
        {"COLOUR_UNSPECIFIED": Colour.UNSPECIFIED, "COLOUR_RED": Colour.RED, 1: Colour.RED},
    ),
    Mood: EnumWire.core_values(Mood, "MOOD_"),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Inner:
    name: str = ""
    colour: Colour | None = None
    note: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Outer:
    mood: Mood
    count: int = 0
    label: str | None = None
    colour: Colour = Colour.UNSPECIFIED
    inners: tuple[Inner, ...] = ()
    usage: Usage = field(default_factory=Usage)
    tags: tuple[str, ...] = ()
    extra: dict[str, Any] | None = None
    flag: bool = False
    shown: str = ""


_RULES = {
    Outer: {
        "count": OMIT_DEFAULT,
        "colour": OMIT_DEFAULT,
        "tags": Rule(omit_default=True, written_with="flag"),
        "extra": Rule(empty_is_absent=True),
        "shown": Rule(omitted_with="flag"),
    },
    Inner: {"colour": Rule(shares_key_of="note"), "note": OMIT_DEFAULT},
}


def _derived() -> Derivation:
    return Derivation(enums=_ENUMS, rules=_RULES)


def test_the_table_shapes_what_is_written_and_read_back() -> None:
    derived = _derived()
    encode, decode = derived.encoder(Outer), derived.decoder(Outer)
    bare = Outer(mood=Mood.CALM)
    assert json.dumps(encode(bare)) == (
        '{"mood": "CALM", "inners": [], "usage": {"model_steps": 0, "tool_calls": 0, "input_tokens": 0, '
        '"output_tokens": 0, "cost_micros": 0, "handoffs": 0}, "flag": false, "shown": ""}'
    )
    full = Outer(
        mood=Mood.CROSS,
        count=3,
        label="",
        colour=Colour.RED,
        inners=(Inner(name="a", colour=Colour.RED, note="ignored"), Inner(name="b", note="why")),
        tags=(),
        extra={},
        flag=True,
    )
    data = encode(full)
    assert list(data) == ["mood", "count", "label", "colour", "inners", "usage", "tags", "flag"]
    assert data["colour"] == "COLOUR_RED" and data["label"] == "" and data["tags"] == []
    assert data["inners"] == [{"name": "a", "note": "COLOUR_RED"}, {"name": "b", "note": "why"}]
    # The enum's wire name wins its shared key; the other field reads back at its default.
    again = decode(json.loads(json.dumps(data)))
    assert again == Outer(
        mood=Mood.CROSS,
        count=3,
        label="",
        colour=Colour.RED,
        inners=(Inner(name="a", colour=Colour.RED), Inner(name="b", note="why")),
        flag=True,
    )
    assert decode({"mood": "MOOD_CALM", "count": "7", "colour": 1, "extra": {"k": [1]}}) == Outer(
        mood=Mood.CALM, count=7, colour=Colour.RED, extra={"k": [1]}
    )  # the API's enum name, an int64 as text, an enum by number
    assert decode({"mood": "CALM", "colour": "COLOUR_BLUE", "inners": [{"note": 1}]}) == Outer(
        mood=Mood.CALM, inners=(Inner(note=1),)
    )  # an unknown name reads as the default; a number names no member in a text key


@pytest.mark.parametrize("stored", [{}, {"mood": "GRUMPY"}, {"mood": ["CALM"]}, {"mood": None}])
def test_an_enum_without_a_default_must_be_present_and_known(stored: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="Outer without a mood this runtime knows"):
        _derived().decoder(Outer)(stored)


def test_a_plain_list_field_refuses_a_text_it_would_iterate() -> None:
    with pytest.raises(TypeError, match="list field holds a str"):
        _derived().decoder(Outer)({"mood": "CALM", "tags": "abc"})


@dataclass(frozen=True, slots=True, kw_only=True)
class HasFloat:
    ratio: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class HasOptionalList:
    items: tuple[str, ...] | None = None
    kind: Mood | None = None
    label: str = ""


@pytest.mark.parametrize(
    ("cls", "rules", "why"),
    [
        (HasFloat, {}, "HasFloat.ratio: the event codec cannot store a <class 'float'>"),
        (Outer, {Outer: {"nope": OMIT_DEFAULT}}, "rules of Outer name fields it lacks: ['nope']"),
        (Outer, {Outer: {"tags": Rule(omit_default=True, written_with="gone")}}, "lacks: ['gone']"),
        (Outer, {Outer: {"count": Rule(empty_is_absent=True)}}, "only a field typed X | None reads"),
        (Outer, {Outer: {"count": Rule(written_with="flag")}}, "written_with goes with omit_default"),
        (Outer, {Outer: {"count": Rule(omit_default=True, omitted_with="flag")}}, "written_with goes"),
        (HasOptionalList, {HasOptionalList: {"items": Rule(shares_key_of="label")}}, "only an enum typed"),
    ],
)
def test_what_the_table_cannot_say_fails_at_derivation(
    cls: type[Any], rules: dict[type[Any], dict[str, Rule]], why: str
) -> None:
    with pytest.raises(TypeError, match=re.escape(why)):
        Derivation(enums=_ENUMS, rules=rules).encoder(cls)


def test_an_enum_needs_wire_names_and_every_member_a_proto_value() -> None:
    with pytest.raises(TypeError, match=re.escape("Outer.mood: no wire names for the enum Mood")):
        Derivation(enums={Colour: _ENUMS[Colour]}, rules={}).encoder(Outer)
    with pytest.raises(ValueError, match="RUN_PHASE_CALM"):
        EnumWire.proto_names(Mood, "RUN_PHASE_", run_pb2.RunPhase)


def test_every_event_class_runs_generated_code_without_reflection() -> None:
    sources = _event_codec._DERIVED.sources
    for cls in ev.EVENT_CLASSES.values():
        for verb in ("encoder", "decoder"):
            text = sources[f"<agentrt derived {verb} of {cls.__module__}.{cls.__qualname__}>"]
            assert not any(word in text for word in ("getattr", "fields(", "asdict", "__dict__")), text
