"""Frozen dataclasses <-> proto3 JSON objects, derived once per class from its fields and a table.

The event codec (``_event_codec.py``) states the log's wire shape as data: how each enum is
written, and the few fields written otherwise than the rule below. This module turns a class
and that table into an encoder and a decoder:

- every field is written under its own name, in field order. A field typed ``X | None`` is left
  out when None (proto3 JSON has no null for an absent value); a ``Rule`` says which others are
  left out at their default, as protobuf leaves out zero values.
- a missing key reads as the field's default, or else its type's zero ("", 0, False, empty, an
  empty message, the enum's UNSPECIFIED); an int may be a JSON string (proto3 JSON's int64). An
  enum reads by any of its wire names or numbers, anything else as that default; an enum field
  with no default and no UNSPECIFIED (a phase) is refused instead.
- a value class with its own ``to_json``/``from_json`` (Usage, Budgets, PayloadRef) is written
  by them; any other dataclass is derived the same way, recursively.

Each encoder and decoder is generated as Python source and compiled once per class, as
``dataclasses`` and cattrs do: the step path runs straight-line code, as fast as hand-written
pairs, with no reflection per event (``Derivation.sources`` keeps the code, and tracebacks show
it). A field of a type this module does not know fails when the class is derived, at import.
"""

from __future__ import annotations

import dataclasses
import linecache
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

__all__ = ["OMIT_DEFAULT", "Decoder", "Derivation", "Encoder", "EnumWire", "Rule", "enum_member"]

E = TypeVar("E", bound=Enum)
Encoder = Callable[[Any], dict[str, Any]]
Decoder = Callable[[Mapping[str, Any]], Any]

_EMPTY: Mapping[str, Any] = types.MappingProxyType({})
_NO_DEFAULT = object()  # an enum field that must be present: no default, no UNSPECIFIED member


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """How one field is written, where it differs from the derived rule (always, or None left out).

    Attributes:
        omit_default: left out at its default, as proto3 JSON leaves out zero values.
        written_with: with ``omit_default``: written at its default too when this other field is
            set (differs from its own default).
        omitted_with: written, except at its default when this other field is set.
        empty_is_absent: for ``X | None``: an empty value is not written either, and an empty
            JSON value reads as None.
        shares_key_of: for an enum typed ``X | None``: no key of its own; when set, its wire
            name is written in the key of this other field instead of that field's value, and
            a value of that key naming a member reads as this field (the other at its default).
    """

    omit_default: bool = False
    written_with: str = ""
    omitted_with: str = ""
    empty_is_absent: bool = False
    shares_key_of: str = ""


OMIT_DEFAULT = Rule(omit_default=True)


def enum_member(table: Mapping[object, E], value: object, default: E) -> E:
    """The member stored as ``value`` (a wire name or number), or ``default`` for anything else."""
    return table.get(value, default) if isinstance(value, str | int) else default


@dataclass(frozen=True, slots=True)
class EnumWire:
    """How one enum is written (member -> wire text) and read (wire text or number -> member)."""

    to_wire: Mapping[Any, str]
    from_wire: Mapping[object, Any]

    @classmethod
    def proto_names(cls, members: type[Enum], prefix: str, proto_enum: Any) -> EnumWire:
        """Written by the proto enum's value name (``prefix`` + member name), read by name or number.

        Raises:
            ValueError: a member has no value in ``proto_enum`` (at import, not on a stored event).
        """
        to_wire = {m: f"{prefix}{m.name}" for m in members}
        from_wire: dict[object, Any] = {}
        for member, wire in to_wire.items():
            from_wire[wire] = member
            from_wire[proto_enum.Value(wire)] = member
        return cls(to_wire, from_wire)

    @classmethod
    def core_values(cls, members: type[Enum], api_prefix: str) -> EnumWire:
        """Written in the core's word (the member's value), read by it or by the API's enum name."""
        to_wire = {m: str(m.value) for m in members}
        from_wire: dict[object, Any] = {wire: m for m, wire in to_wire.items()}
        from_wire.update({f"{api_prefix}{m.name}": m for m in members})
        return cls(to_wire, from_wire)


# -- what a field's type makes of it ---------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Kind:
    tag: str  # "plain", "int", "bool", "enum", "value", "seq" or "map"
    enum: EnumWire | None = None
    enum_zero: Any = None
    to_json: Callable[[Any], Any] | None = None
    from_json: Callable[[Any], Any] | None = None
    item: _Kind | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Field:
    name: str
    kind: _Kind
    optional: bool
    zero: Any  # the default, else the type's zero; _NO_DEFAULT for an enum that must be present
    rule: Rule


def _optional_of(tp: Any) -> Any | None:
    """``X`` for ``X | None``, else None."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = typing.get_args(tp)
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            return rest[0]
    return None


def _seq_item(tp: Any) -> Any | None:
    args = typing.get_args(tp)
    if typing.get_origin(tp) is tuple and len(args) == 2 and args[1] is Ellipsis:
        return args[0]
    return None


_ZEROS: dict[str, Any] = {"plain": "", "int": 0, "bool": False, "seq": (), "map": _EMPTY}
_LITERALS = (str, int, bool, type(None))


class _Source:
    """The values a generated function's code names."""

    def __init__(self) -> None:
        self.names: dict[str, Any] = {}

    def ref(self, value: Any, hint: str = "v") -> str:
        """A name (or literal) for ``value`` in the generated code; ``hint`` says what it is."""
        if type(value) in _LITERALS:
            return repr(value)
        for name, known in self.names.items():
            if known is value:
                return name
        name = f"_{hint}{len(self.names)}"
        self.names[name] = value
        return name


class Derivation:
    """Encoders and decoders of dataclasses, derived once per class from its fields and the table.

    Args:
        enums: how each enum type a field may hold is written and read.
        rules: per class, the fields written otherwise than the rule (by field name).

    Raises:
        TypeError: a rule names a field the class lacks, or asks what its field cannot do.
    """

    def __init__(
        self, *, enums: Mapping[type[Enum], EnumWire], rules: Mapping[type[Any], Mapping[str, Rule]]
    ) -> None:
        self._enums = dict(enums)
        self._rules = {cls: dict(by_field) for cls, by_field in rules.items()}
        self._encoders: dict[type[Any], Encoder] = {}
        self._decoders: dict[type[Any], Decoder] = {}
        self.sources: dict[str, str] = {}  # generated code by its file name, for people
        for cls, by_field in self._rules.items():
            names = {f.name for f in dataclasses.fields(cls)}
            for name, rule in by_field.items():
                others = [rule.written_with, rule.omitted_with, rule.shares_key_of]
                unknown = [n for n in (name, *others) if n and n not in names]
                if unknown:
                    raise TypeError(f"rules of {cls.__name__} name fields it lacks: {unknown}")

    def encoder(self, cls: type[Any]) -> Encoder:
        """The function that writes a ``cls`` as a JSON object (keys in field order)."""
        if cls not in self._encoders:
            self._encoders[cls] = self._build_encoder(cls)
        return self._encoders[cls]

    def decoder(self, cls: type[Any]) -> Decoder:
        """The function that reads a ``cls`` from a JSON object (raises ValueError, TypeError,
        AttributeError on a shape it cannot read)."""
        if cls not in self._decoders:
            self._decoders[cls] = self._build_decoder(cls)
        return self._decoders[cls]

    # -- the plan ----------------------------------------------------------------------------------

    def _fields(self, cls: type[Any]) -> list[_Field]:
        hints = typing.get_type_hints(cls)
        rules = self._rules.get(cls, {})
        plan: list[_Field] = []
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            where = f"{cls.__name__}.{f.name}"
            inner = _optional_of(hints[f.name])
            kind = self._kind(inner if inner is not None else hints[f.name], where)
            rule = rules.get(f.name, Rule())
            if f.default is not dataclasses.MISSING:
                zero = f.default
            elif inner is not None:
                zero = None
            elif kind.tag == "enum":
                zero = kind.enum_zero
            elif f.default_factory is not dataclasses.MISSING:
                zero = f.default_factory()
            else:
                zero = _ZEROS.get(kind.tag, _EMPTY)
            if rule.empty_is_absent and inner is None:
                raise TypeError(f"{where}: only a field typed X | None reads an empty value as None")
            if rule.shares_key_of and (inner is None or kind.tag != "enum"):
                raise TypeError(f"{where}: only an enum typed X | None shares another field's key")
            if (rule.written_with and not rule.omit_default) or (rule.omitted_with and rule.omit_default):
                raise TypeError(f"{where}: written_with goes with omit_default, omitted_with without it")
            plan.append(_Field(name=f.name, kind=kind, optional=inner is not None, zero=zero, rule=rule))
        return plan

    def _kind(self, tp: Any, where: str) -> _Kind:
        if tp is bool:
            return _Kind(tag="bool")
        if tp is int:
            return _Kind(tag="int")
        if tp is str:
            return _Kind(tag="plain")
        if isinstance(tp, type) and issubclass(tp, Enum):
            wire = self._enums.get(tp)
            if wire is None:
                raise TypeError(f"{where}: no wire names for the enum {tp.__name__}")
            return _Kind(tag="enum", enum=wire, enum_zero=tp.__members__.get("UNSPECIFIED", _NO_DEFAULT))
        item = _seq_item(tp)
        if item is not None:
            return _Kind(tag="seq", item=self._kind(item, where))
        if typing.get_origin(tp) in (Mapping, dict) and typing.get_args(tp)[:1] == (str,):
            return _Kind(tag="map")  # values kept as stored: plain JSON (run variables, sampling)
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            if hasattr(tp, "to_json") and hasattr(tp, "from_json"):  # the core writes it itself
                return _Kind(tag="value", to_json=tp.to_json, from_json=tp.from_json)
            return _Kind(tag="value", to_json=self.encoder(tp), from_json=self.decoder(tp))
        raise TypeError(f"{where}: the event codec cannot store a {tp!r}")

    # -- code --------------------------------------------------------------------------------------

    @staticmethod
    def _enc(kind: _Kind, expr: str, src: _Source) -> str:
        if kind.tag == "enum":
            assert kind.enum is not None
            return f"{src.ref(kind.enum.to_wire, 'wire')}[{expr}]"
        if kind.tag == "value":
            return f"{src.ref(kind.to_json, 'to_json')}({expr})"
        if kind.tag == "seq":
            assert kind.item is not None
            item = Derivation._enc(kind.item, "item", src)
            return f"list({expr})" if item == "item" else f"[{item} for item in {expr}]"
        if kind.tag == "map":
            return f"dict({expr})"
        return expr

    @staticmethod
    def _dec(kind: _Kind, expr: str, src: _Source, zero: Any, where: str) -> str:
        if kind.tag == "int":
            return f"int({expr})"
        if kind.tag == "bool":
            return f"bool({expr})"
        if kind.tag == "enum":
            assert kind.enum is not None
            table = src.ref(kind.enum.from_wire, "members")
            if zero is _NO_DEFAULT:
                return f"_required({table}, {expr}, {where!r})"
            default = src.ref(zero, "default")  # inline: one call less per enum field read
            return f"({table}.get(m, {default}) if isinstance(m := {expr}, _NAME_OR_NUMBER) else {default})"
        if kind.tag == "value":
            return f"{src.ref(kind.from_json, 'from_json')}({expr})"
        if kind.tag == "seq":
            assert kind.item is not None
            item_zero = kind.item.enum_zero if kind.item.tag == "enum" else None
            item = Derivation._dec(kind.item, "item", src, item_zero, where)
            if item == "item":  # plain items: a text would iterate as its letters
                return f"tuple(_seq({expr}))"
            return f"tuple([{item} for item in {expr}])"  # anything but a list fails on its items
        if kind.tag == "map":
            return f"_map({expr})"
        return expr

    @staticmethod
    def _is_set(field: _Field, expr: str, src: _Source) -> str:
        """Code that is true when ``expr`` (the field's value) differs from its default."""
        if field.optional:
            return f"{expr} is not None"
        if field.kind.tag == "enum":
            return f"{expr} is not {src.ref(field.zero, 'default')}"
        if not field.zero and field.kind.tag in _ZEROS:
            return expr
        return f"{expr} != {src.ref(field.zero, 'default')}"

    def _build_encoder(self, cls: type[Any]) -> Encoder:
        plan = self._fields(cls)
        by_name = {f.name: f for f in plan}
        shared = {f.rule.shares_key_of: f for f in plan if f.rule.shares_key_of}
        src = _Source()
        leading: list[str] = []  # the keys before the first conditional one: one dict display
        body: list[str] = []
        for f in plan:
            if f.rule.shares_key_of:
                continue  # written in its partner's key
            key = repr(f.name)
            condition = self._condition(f, by_name, src)
            if f.name in shared:  # one key, two fields: the enum's wire name when it is set
                source = shared[f.name]
                named = self._enc(source.kind, f"e.{source.name}", src)
                plain = self._enc(f.kind, f"e.{f.name}", src)
                body.append(f"v = {named} if {self._is_set(source, f'e.{source.name}', src)} else {plain}")
                condition = self._is_set(f, "v", src) if f.rule.omit_default else ""
                body += [f"if {condition}:", f"    out[{key}] = v"] if condition else [f"out[{key}] = v"]
            elif condition:
                body += [f"if {condition}:", f"    out[{key}] = {self._enc(f.kind, 'v', src)}"]
            elif body:
                body.append(f"out[{key}] = {self._enc(f.kind, f'e.{f.name}', src)}")
            else:
                leading.append(f"    {key}: {self._enc(f.kind, f'e.{f.name}', src)},")
        lines = ["out = {", *leading, "}", *body, "return out"]
        encoder: Encoder = self._compile(cls, "encode", "e", lines, src)
        return encoder

    def _condition(self, f: _Field, by_name: Mapping[str, _Field], src: _Source) -> str:
        """When ``f`` is written (binding its value to ``v``); "" for always."""
        if f.optional:
            return f"(v := e.{f.name})" if f.rule.empty_is_absent else f"(v := e.{f.name}) is not None"
        if f.rule.omit_default:
            condition = self._is_set(f, f"(v := e.{f.name})", src)
            if f.rule.written_with:
                other = by_name[f.rule.written_with]
                condition += f" or {self._is_set(other, f'e.{other.name}', src)}"
            return condition
        if f.rule.omitted_with:
            other = by_name[f.rule.omitted_with]
            unless = self._is_set(other, f"e.{other.name}", src)
            return f"{self._is_set(f, f'(v := e.{f.name})', src)} or not ({unless})"
        return ""

    def _build_decoder(self, cls: type[Any]) -> Decoder:
        plan = self._fields(cls)
        by_name = {f.name: f for f in plan}
        owner = str(getattr(cls, "type_name", cls.__name__))
        src = _Source()
        src.names.update(_required=_required, _seq=_seq, _map=_map, _NAME_OR_NUMBER=(str, int))
        src.names["_cls"] = cls
        pre: list[str] = []
        args: list[str] = []
        for f in plan:
            key = repr(f.name)
            where = f"{owner} without a {f.name}"  # what a required enum's refusal says
            if f.rule.shares_key_of:
                target = by_name[f.rule.shares_key_of]
                assert f.kind.enum is not None
                table = src.ref(f.kind.enum.from_wire, "members")
                pre.append(f"k_{target.name} = d.get({target.name!r}, {src.ref(target.zero)})")
                # The key holds text: a number names no member here.
                named = f"{table}.get(k_{target.name}) if isinstance(k_{target.name}, str) else None"
                pre.append(f"s_{f.name} = {named}")
                args.append(f"{f.name}=s_{f.name},")
                continue
            if any(o.rule.shares_key_of == f.name for o in plan):
                source = next(o for o in plan if o.rule.shares_key_of == f.name)
                value = self._dec(f.kind, f"k_{f.name}", src, f.zero, where)
                args.append(f"{f.name}={src.ref(f.zero)} if s_{source.name} is not None else {value},")
                continue
            if f.optional:
                value = self._dec(f.kind, "v", src, f.zero, where)
                if f.rule.empty_is_absent:
                    args.append(f"{f.name}={value} if (v := d.get({key})) else None,")
                elif value == "v":
                    args.append(f"{f.name}=d.get({key}),")
                else:
                    args.append(f"{f.name}=None if (v := d.get({key})) is None else {value},")
                continue
            if f.kind.tag == "enum":
                raw = f"d.get({key})"  # a missing key reads as the enum's default
            elif f.kind.tag in ("value", "map"):
                raw = f"d.get({key}, {src.ref(_EMPTY, 'empty')})"
            else:
                raw = f"d.get({key}, {src.ref(f.zero, 'default')})"
            args.append(f"{f.name}={self._dec(f.kind, raw, src, f.zero, where)},")
        body = [*pre, "return _cls(", *(f"    {line}" for line in args), ")"]
        decoder: Decoder = self._compile(cls, "decode", "d", body, src)
        return decoder

    def _compile(self, cls: type[Any], verb: str, arg: str, body: list[str], src: _Source) -> Any:
        name = f"{verb}_{cls.__name__}"
        text = "\n".join([f"def {name}({arg}):", *(f"    {line}" for line in body), ""])
        filename = f"<agentrt derived {verb}r of {cls.__module__}.{cls.__qualname__}>"
        code = compile(text, filename, "exec")
        namespace = dict(src.names)
        exec(code, namespace)  # our own field names and table only: no stored text reaches the code
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        self.sources[filename] = text
        return namespace[name]


def _required(table: Mapping[object, Any], value: object, refusal: str) -> Any:
    """The member ``value`` names; ValueError for none (an enum with no default a value could take)."""
    member = table.get(value) if isinstance(value, str | int) else None
    if member is None:
        raise ValueError(f"{refusal} this runtime knows: {str(value)[:40]!r}")
    return member


def _seq(value: object) -> list[Any] | tuple[Any, ...]:
    if isinstance(value, list | tuple):
        return value
    raise TypeError(f"a list field holds a {type(value).__name__}")


def _map(value: object) -> dict[str, Any]:
    """A map as stored (plain JSON values kept as they are); anything but an object reads as empty."""
    return {str(k): v for k, v in value.items()} if isinstance(value, Mapping) else {}
