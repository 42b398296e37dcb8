"""The bounded JSON parser, and every core path that reads JSON a model or tool wrote."""

from __future__ import annotations

import json

import pytest

from agentrt.server.core import (
    Budgets,
    Clock,
    JsonBoundsError,
    JsonLimits,
    ModelCompleted,
    Policy,
    RunStarted,
    RunState,
    StepStarted,
    ToolCallRequest,
    ToolErrorCode,
    ToolFailed,
    ToolStarted,
    Usage,
    args_hash,
    decide,
    loads_bounded,
    nesting_depth,
)
from agentrt.server.core._loops import signature

DEEP = "[" * 100_000 + "]" * 100_000
HOSTILE = [
    DEEP,
    '{"a":' * 50_000 + "1" + "}" * 50_000,
    "[" * 100_000,  # unbalanced: the C scanner would recurse before it saw the end
    '[{"x": ' * 40 + "[" * 40 + "1" + "]" * 40 + "}]" * 40,
]


@pytest.mark.parametrize("text", HOSTILE, ids=["arrays", "objects", "unbalanced", "mixed"])
def test_deep_json_is_a_typed_error_not_a_recursion_error(text: str) -> None:
    with pytest.raises(JsonBoundsError) as caught:
        loads_bounded(text)
    assert caught.value.reason == "too_deep"
    assert isinstance(caught.value, ValueError)
    assert len(str(caught.value)) < 100  # never quotes the text


def test_depth_bound_is_exact() -> None:
    limits = JsonLimits(max_depth=5)
    assert loads_bounded("[" * 5 + "]" * 5, limits) == [[[[[]]]]]
    with pytest.raises(JsonBoundsError, match="deeper than 5"):
        loads_bounded("[" * 6 + "]" * 6, limits)


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"a": '[[[[[[[[[[{{{{{{{{{\\"[[[[[[', "b": ["]]]]]]"]})
    assert loads_bounded(text, JsonLimits(max_depth=2)) == json.loads(text)
    assert nesting_depth(text, stop_at=0) == 2  # the object and the list; none inside strings


def test_many_shallow_brackets_are_fine() -> None:
    text = json.dumps([{"a": [1, {"b": [2]}]} for _ in range(20_000)])
    assert loads_bounded(text, JsonLimits(max_depth=5)) == json.loads(text)  # list obj list obj list
    with pytest.raises(JsonBoundsError):
        loads_bounded(text, JsonLimits(max_depth=4))


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("x" * 2000, "too_large"),
        ('"' + "é" * 600 + '"', "too_large"),  # 1,202 bytes in 602 characters
        (b"[" + b"1," * 1000 + b"1]", "too_large"),
        ("{", "invalid"),
        ("[NaN]", "invalid"),
        ("[Infinity]", "invalid"),
        (b"\xff\xfe", "invalid"),
        ("1" * 5000, "too_large"),
    ],
)
def test_size_and_syntax_violations(text: str | bytes, reason: str) -> None:
    with pytest.raises(JsonBoundsError) as caught:
        loads_bounded(text, JsonLimits(max_bytes=1024))
    assert caught.value.reason == reason


def test_huge_integer_is_invalid_not_a_crash() -> None:
    with pytest.raises(JsonBoundsError) as caught:
        loads_bounded("9" * 5000)
    assert caught.value.reason == "invalid"


def test_loop_signatures_and_args_hash_take_hostile_json() -> None:
    # The loop tracker folds every call and result: it must never raise.
    assert signature("t", DEEP) == signature("t", DEEP)
    assert signature("t", '{"a": 1}') == signature("t", '{ "a" : 1 }')
    with pytest.raises(JsonBoundsError):
        args_hash(DEEP)


def _state_with_call(arguments_json: str) -> RunState:
    state = RunState(run_id="r1")
    calls = (ToolCallRequest("c1", "t", arguments_json), ToolCallRequest("c2", "t", '{"ok": true}'))
    for event in (
        RunStarted(input="hi"),
        StepStarted(step=1),
        ModelCompleted(step=1, tool_calls=calls, usage_after=Usage(model_steps=1)),
    ):
        state.apply(event)
        state.seq += 1
    return state


@pytest.mark.parametrize("arguments", [DEEP, "{not json", '{"a": NaN}'])
def test_decider_refuses_unbounded_arguments_with_invalid_input(arguments: str) -> None:
    state = _state_with_call(arguments)
    decision = decide(state, Budgets(), Clock(now_s=0, deadline_s=100), Policy())
    events = decision.events  # type: ignore[attr-defined]
    assert [type(e) for e in events] == [ToolFailed]
    error = events[0].error
    assert events[0].call_id == "c1"
    assert error.code is ToolErrorCode.INVALID_INPUT
    assert arguments[:20] not in error.message
    for event in events:
        state.apply(event)
        state.seq += 1
    # The run goes on: the well-formed call starts next.
    following = decide(state, Budgets(), Clock(now_s=0, deadline_s=100), Policy())
    assert [type(e) for e in following.events] == [ToolStarted]  # type: ignore[attr-defined]


def test_empty_arguments_are_not_refused() -> None:
    state = _state_with_call("")
    decision = decide(state, Budgets(), Clock(now_s=0, deadline_s=100), Policy())
    assert isinstance(decision.events[0], ToolStarted)  # type: ignore[attr-defined]
