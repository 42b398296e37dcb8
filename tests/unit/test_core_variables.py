"""Run variables (core/_variables.py): what a tool result may set, and what is refused."""

from __future__ import annotations

import json

import pytest

from agentrt.server.core import MAX_VARIABLES, RunState, VariablesSet, variables_requested


def ask(variables: object, current: dict[str, object] | None = None) -> str:
    change = variables_requested(json.dumps({"ok": 1, "_set_variables": variables}), current or {})  # type: ignore[arg-type]
    assert change is not None
    return change.refused_reason


def test_results_without_the_member_ask_nothing() -> None:
    assert variables_requested('{"ok": 1}', {}) is None
    assert variables_requested('"_set_variables"', {}) is None  # a string, not an object
    assert variables_requested("not json _set_variables", {}) is None


def test_strings_numbers_and_booleans_are_set_and_null_removes() -> None:
    change = variables_requested(
        json.dumps({"_set_variables": {"order_id": "A100", "amount": 12.5, "verified": True, "old": None}}),
        {"old": "x"},
    )
    assert change is not None and change.refused_reason == ""
    assert change.variables == {"order_id": "A100", "amount": 12.5, "verified": True}
    assert change.removed == ("old",)


@pytest.mark.parametrize(
    ("variables", "reason"),
    [
        ([1, 2], "_set_variables must be an object"),
        ({"a b": 1}, "is not an identifier"),
        ({"x" * 65: 1}, "is not an identifier"),
        ({"nested": {"a": 1}}, "a value must be a string, a number or a boolean, not dict"),
        ({"list": [1]}, "not list"),
        ({"big": 2**60}, "too large to keep exactly"),
        ({"db_password": "hunter2"}, "looks like a secret's"),
        ({"API_KEY": "x"}, "looks like a secret's"),
        ({"note": "-----BEGIN RSA PRIVATE KEY-----\nabc"}, "looks like a credential"),
        ({"note": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NSJ9.sig"}, "looks like a credential"),
        ({"note": "sk-abcdefghijklmnopqrstuvwx"}, "looks like a credential"),
        ({"note": "Bearer abc"}, "looks like a credential"),
    ],
)
def test_hostile_requests_are_refused_whole(variables: object, reason: str) -> None:
    assert reason in ask(variables)


def test_the_count_and_the_total_size_are_bounded_with_what_the_run_has() -> None:
    have = {f"v{i}": i for i in range(MAX_VARIABLES)}
    assert "the run would have 65 variables" in ask({"one_more": 1}, have)
    assert ask({"v0": 2}, have) == ""  # replacing one is fine
    big = {f"s{i}": "x" * 1000 for i in range(16)}
    assert "bytes; at most 16384" in ask({"s16": "x" * 1000}, big)
    assert ask({"n": 1.5}) == ""


def test_non_finite_numbers_are_refused() -> None:
    change = variables_requested('{"_set_variables": {"n": 1e400}}', {})
    assert change is not None and "not finite" in change.refused_reason


def test_the_fold_applies_changes_and_ignores_refusals() -> None:
    state = RunState(run_id="r")
    state.apply(VariablesSet(call_id="c", variables={"a": "x", "b": True}))
    state.apply(VariablesSet(call_id="c", variables={"c": 1}, removed=("a",)))
    state.apply(VariablesSet(call_id="c", variables={"z": 1}, refused_reason="variables refused: no"))
    assert state.variables == {"b": True, "c": 1}
