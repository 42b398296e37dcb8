"""Run variables (S004 §1.2): business facts a run carries, set by tools through their results.

A tool sets variables by returning a JSON object with the reserved member ``"_set_variables"``,
an object of name -> value; a null value removes the variable. The member is read from the
result as the tool host recorded it, so a replayed, deduplicated or recovered result sets the
same variables as the first, with no field of its own in the ledger or on the wire.

Variables are bounded facts such as an order id or that an identity was verified, never
secrets: they are stored in clear in the run's log and row, shown in GetRun and to approvers.
A request is applied whole or refused whole (the reason is recorded and the run goes on) when:

- it is not an object, or names more than :data:`MAX_VARIABLES` variables in all;
- a name is not an identifier-like string of at most :data:`MAX_NAME_CHARS` characters;
- a value is not a string, a finite number or a boolean, or a string is over
  :data:`MAX_STRING_BYTES` UTF-8 bytes, or all variables together pass :data:`MAX_TOTAL_BYTES`;
- a name looks like a secret's (``password``, ``token``, ``api_key`` ...), or a value looks
  like a credential (a private key block, a JWT, a bearer token, an ``sk-`` key). These are
  heuristics against accidents, not a guarantee: tools must not put secrets there.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentrt.server.core._events import VariableValue
from agentrt.server.core._json import object_with_members

__all__ = [
    "MAX_NAME_CHARS",
    "MAX_STRING_BYTES",
    "MAX_TOTAL_BYTES",
    "MAX_VARIABLES",
    "SET_VARIABLES",
    "VariableChange",
    "variables_json",
    "variables_requested",
]

SET_VARIABLES = "_set_variables"
MAX_VARIABLES = 64
MAX_NAME_CHARS = 64
MAX_STRING_BYTES = 1024
MAX_TOTAL_BYTES = 16 * 1024
_MAX_EXACT_INT = 2**53  # a number is a double on the wire (google.protobuf.Value)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\Z")
_SECRET_NAME = re.compile(
    r"pass(word|wd|phrase)|secret|token|api[_.-]?key|credential|private[_.-]?key|bearer|cookie|"
    r"session[_.-]?key|access[_.-]?key|auth[_.-]?(code|header)",
    re.IGNORECASE,
)
_SECRET_VALUE = re.compile(
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----|^eyJ[\w-]{8,}\.[\w-]{8,}\.|^bearer\s"
    r"|^(sk|rk|pk)[-_][A-Za-z0-9_-]{16,}|^(ghp|gho|github_pat|xox[abpr])_?[A-Za-z0-9_-]{16,}|^AKIA[0-9A-Z]{16}$",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class VariableChange:
    """What a result asked for: variables to set and to remove, or why it was refused."""

    variables: Mapping[str, VariableValue] = field(default_factory=dict)
    removed: tuple[str, ...] = ()
    refused_reason: str = ""


def variables_json(variables: Mapping[str, VariableValue]) -> str:
    """The canonical JSON of a variable map (sorted names): the row's column and the size measure."""
    return json.dumps(dict(variables), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def variables_requested(result_json: str, current: Mapping[str, VariableValue]) -> VariableChange | None:
    """The variable change a tool result asks for, checked against the run's ``current`` variables.

    Returns:
        None when the result does not ask (not an object, or no ``_set_variables`` member);
        otherwise the change to apply, or a refusal (``refused_reason`` set, nothing to apply).
    """
    result = object_with_members(result_json, (SET_VARIABLES,))
    if result is None:
        return None
    asked = result[SET_VARIABLES]
    if not isinstance(asked, dict):
        return _refused(f"{SET_VARIABLES} must be an object of name -> value")
    if len(asked) > MAX_VARIABLES:
        return _refused(f"{len(asked)} variables asked for; at most {MAX_VARIABLES}")
    merged: dict[str, VariableValue] = dict(current)
    setting: dict[str, VariableValue] = {}
    removed: list[str] = []
    for name, value in asked.items():
        problem = _name_problem(name) or (None if value is None else _value_problem(name, value))
        if problem:
            return _refused(problem)
        if value is None:
            if name in merged:
                removed.append(name)
            merged.pop(name, None)
            setting.pop(name, None)
        else:
            merged[name] = setting[name] = value
    if len(merged) > MAX_VARIABLES:
        return _refused(f"the run would have {len(merged)} variables; at most {MAX_VARIABLES}")
    size = len(variables_json(merged).encode())
    if size > MAX_TOTAL_BYTES:
        return _refused(f"the run's variables would take {size} bytes; at most {MAX_TOTAL_BYTES}")
    return VariableChange(variables=setting, removed=tuple(removed))


def _refused(reason: str) -> VariableChange:
    return VariableChange(refused_reason=f"variables refused: {reason}")


def _name_problem(name: str) -> str | None:
    if len(name) > MAX_NAME_CHARS or not _NAME.match(name):
        return f"name {name[:MAX_NAME_CHARS]!r} is not an identifier of at most {MAX_NAME_CHARS} characters"
    if _SECRET_NAME.search(name):
        return f"name {name!r} looks like a secret's; run variables are never secrets"
    return None


def _value_problem(name: str, value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return None if abs(value) <= _MAX_EXACT_INT else f"{name}: the number is too large to keep exactly"
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{name}: the number is not finite"
    if not isinstance(value, str):
        return f"{name}: a value must be a string, a number or a boolean, not {type(value).__name__}"
    if len(value.encode()) > MAX_STRING_BYTES:
        return f"{name}: the string is over {MAX_STRING_BYTES} bytes"
    if _SECRET_VALUE.search(value.strip()):
        return f"{name}: the value looks like a credential; run variables are never secrets"
    return None
