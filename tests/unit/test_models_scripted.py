"""The ``scripted`` model provider: decisions, placeholders, exhaustion, injected errors, options."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest

from agentrt.server.models import (
    EXHAUSTED_TEXT,
    Message,
    ModelAuthError,
    ModelConfigError,
    ModelError,
    ModelPermanentError,
    ModelRequest,
    ModelResponse,
    ModelSpecData,
    ModelToolCall,
    ModelTransientError,
    ScriptedProvider,
)

SCRIPT: dict[str, Any] = {
    "steps": [
        {
            "text": "Looking up {input}",
            "tool_calls": [
                {"tool": "orders.lookup", "arguments": {"order_id": "{input}", "fields": ["{input}", 3]}},
                {"tool": "orders.track", "arguments": {}},
            ],
        },
        {"text": "Order shipped."},
    ]
}


def make_request(
    step: int,
    *,
    user: str = "A100",
    run_id: str = "run-1",
    timeout_s: float | None = None,
    options: dict[str, Any] | None = None,
) -> ModelRequest:
    """The request of model step ``step`` of a run whose earlier steps each called one tool."""
    history: list[Message] = []
    for earlier in range(1, step):
        call = ModelToolCall(call_id=f"call_{earlier}_0", tool="t.x", arguments_json="{}")
        history += [
            Message(role="assistant", tool_calls=(call,)),
            Message(role="tool", tool_call_id=call.call_id, content="{}"),
        ]
    return ModelRequest(
        run_id=run_id,
        step=step,
        spec=ModelSpecData(provider="scripted", name="demo", options=options or {}),
        messages=(Message(role="system", content="You help."), Message(role="user", content=user), *history),
        tools=(),
        timeout_s=timeout_s,
    )


def asked_again(request: ModelRequest, *, times: int = 1) -> ModelRequest:
    """The same conversation asked again after the answer was lost: the run counted the step."""
    return dataclasses.replace(request, step=request.step + times)


def answered(request: ModelRequest, response: ModelResponse, *results: str) -> ModelRequest:
    """The next step's request, once ``response`` and its tool results are in the history."""
    calls = response.tool_calls
    history = [Message(role="assistant", content=response.text, tool_calls=calls)]
    history += [
        Message(role="tool", tool_call_id=c.call_id, content=r) for c, r in zip(calls, results, strict=True)
    ]
    return dataclasses.replace(request, step=request.step + 1, messages=(*request.messages, *history))


async def test_decision_is_the_step_of_the_script() -> None:
    provider = ScriptedProvider(options=SCRIPT)

    first = await provider.complete(make_request(1))
    second = await provider.complete(make_request(2))

    assert first.text == "Looking up A100"
    assert first.tool_calls == (
        ModelToolCall(
            call_id="call_1_0", tool="orders.lookup", arguments_json='{"order_id":"A100","fields":["A100",3]}'
        ),
        ModelToolCall(call_id="call_1_1", tool="orders.track", arguments_json="{}"),
    )
    assert first.finish_reason == "tool_calls"
    assert second.text == "Order shipped."
    assert second.tool_calls == ()
    assert second.finish_reason == "stop"
    assert provider.step_count == 2
    assert repr(provider) == "ScriptedProvider(steps=2)"


async def test_decisions_are_deterministic_across_instances_and_calls() -> None:
    a, b = ScriptedProvider(options=SCRIPT), ScriptedProvider(options=SCRIPT)

    responses = [await p.complete(make_request(step)) for p in (a, b, a) for step in (1, 2)]

    assert responses[0:2] == responses[2:4] == responses[4:6]


async def test_placeholder_takes_the_first_user_message() -> None:
    provider = ScriptedProvider(options=SCRIPT)
    request = make_request(1)
    request = ModelRequest(
        run_id=request.run_id,
        step=1,
        spec=request.spec,
        messages=(*request.messages, Message(role="user", content="later input")),
        tools=(),
        timeout_s=None,
    )

    response = await provider.complete(request)

    assert response.text == "Looking up A100"
    assert json.loads(response.tool_calls[0].arguments_json)["order_id"] == "A100"


async def test_placeholder_without_user_message_is_empty() -> None:
    provider = ScriptedProvider(options=SCRIPT)
    base = make_request(1)
    request = ModelRequest(
        run_id="r", step=1, spec=base.spec, messages=base.messages[:1], tools=(), timeout_s=None
    )

    response = await provider.complete(request)

    assert response.text == "Looking up "


async def test_past_the_end_the_script_is_exhausted() -> None:
    provider = ScriptedProvider(options=SCRIPT)

    response = await provider.complete(make_request(3))

    assert response.text == EXHAUSTED_TEXT == "(script exhausted)"
    assert response.tool_calls == ()
    assert response.finish_reason == "stop"


async def test_empty_script_is_exhausted_at_once() -> None:
    response = await ScriptedProvider(options={"steps": []}).complete(make_request(1))

    assert response.text == EXHAUSTED_TEXT


async def test_step_below_one_is_a_permanent_error() -> None:
    with pytest.raises(ModelPermanentError, match="step must be 1 or more"):
        await ScriptedProvider(options=SCRIPT).complete(make_request(0))


async def test_token_counts_are_cheap_estimates() -> None:
    provider = ScriptedProvider(options={"steps": [{"text": "x" * 40}]})

    response = await provider.complete(make_request(1, user="y" * 31))

    # Input: "You help." (9) + 31 characters = 40 -> 40 // 4 + 1; output: 40 // 4 + 1.
    assert (response.input_tokens, response.output_tokens) == (11, 11)


async def test_input_token_estimate_counts_tool_calls_in_the_history() -> None:
    provider = ScriptedProvider(options={"steps": [{"text": "x"}, {"text": "y"}]})
    call = ModelToolCall(call_id="c", tool="t" * 10, arguments_json="a" * 30)
    request = make_request(1, user="u" * 31)
    history = (
        *request.messages,
        Message(role="assistant", tool_calls=(call,)),
        Message(role="tool", tool_call_id="c", content="r" * 40),
    )

    response = await provider.complete(
        ModelRequest(run_id="r", step=2, spec=request.spec, messages=history, tools=(), timeout_s=None)
    )

    assert response.input_tokens == (9 + 31 + 10 + 30 + 40) // 4 + 1


async def test_deltas_stream_word_fragments_that_join_to_the_text() -> None:
    text = "  Order {input} has   shipped.\nThanks "
    provider = ScriptedProvider(options={"steps": [{"text": text, "deltas": True}, {"text": "quiet"}]})
    fragments: list[str] = []

    response = await provider.complete(make_request(1), on_text_delta=fragments.append)
    await provider.complete(make_request(2), on_text_delta=fragments.append)

    assert fragments == ["  ", "Order ", "A100 ", "has   ", "shipped.\n", "Thanks "]
    assert "".join(fragments) == response.text


async def test_deltas_without_callback_are_skipped() -> None:
    provider = ScriptedProvider(options={"steps": [{"text": "a b", "deltas": True}]})

    assert (await provider.complete(make_request(1))).text == "a b"


@pytest.mark.parametrize(
    ("kind", "error"),
    [("transient", ModelTransientError), ("permanent", ModelPermanentError), ("auth", ModelAuthError)],
)
async def test_injected_errors_raise_the_matching_model_error(kind: str, error: type[ModelError]) -> None:
    provider = ScriptedProvider(options={"steps": [{"text": "never", "error": kind}]})

    for _ in range(3):  # without error_times the step fails on every call
        with pytest.raises(error, match=f"scripted {kind} error at step 1") as caught:
            await provider.complete(make_request(1))
        assert caught.value.kind == kind
        assert caught.value.reason == "scripted"


async def test_error_times_fails_the_first_calls_of_each_run_then_answers() -> None:
    provider = ScriptedProvider(
        options={"steps": [{"text": "ok", "error": "transient", "error_times": 2, "retry_after_s": 1.5}]}
    )

    for _ in range(2):
        with pytest.raises(ModelTransientError) as caught:
            await provider.complete(make_request(1, run_id="a"))
        assert caught.value.retry_after_s == 1.5
    assert (await provider.complete(make_request(1, run_id="a"))).text == "ok"
    with pytest.raises(ModelTransientError):
        await provider.complete(make_request(1, run_id="b"))


async def test_retry_after_is_only_for_transient_errors() -> None:
    provider = ScriptedProvider(options={"steps": [{"error": "permanent", "retry_after_s": 3}]})

    with pytest.raises(ModelPermanentError) as caught:
        await provider.complete(make_request(1))

    assert caught.value.retry_after_s is None


async def test_delay_longer_than_timeout_is_a_transient_timeout() -> None:
    provider = ScriptedProvider(options={"steps": [{"text": "late"}], "delay_s": 30})
    started = time.monotonic()

    with pytest.raises(ModelTransientError, match="timed out") as caught:
        await provider.complete(make_request(1, timeout_s=0.05))

    assert caught.value.reason == "timeout"
    assert time.monotonic() - started < 5


async def test_delay_within_timeout_answers() -> None:
    provider = ScriptedProvider(options={"steps": [{"text": "slow", "delay_s": 0.01}], "delay_s": 30})

    assert (await provider.complete(make_request(1, timeout_s=10))).text == "slow"


async def test_delay_honours_cancellation() -> None:
    provider = ScriptedProvider(options={"steps": [{"text": "late"}], "delay_s": 30})
    task = asyncio.create_task(provider.complete(make_request(1)))
    await asyncio.sleep(0)  # one loop turn: the task reaches its sleep

    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task


async def test_script_file(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT), encoding="utf-8")

    provider = ScriptedProvider(options={"file": str(script)})

    assert (await provider.complete(make_request(2))).text == "Order shipped."


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (None, "cannot read"),
        ("{not json", "invalid script file"),
        ('[{"text": "x"}]', "invalid script file"),
        ('{"steps": [{"txt": "x"}]}', r"steps\.0\.txt: Extra inputs are not permitted"),
    ],
)
async def test_bad_script_file_is_a_config_error(tmp_path: Path, content: str | None, match: str) -> None:
    script = tmp_path / "script.json"
    if content is not None:
        script.write_text(content, encoding="utf-8")

    with pytest.raises(ModelConfigError, match=match) as caught:
        ScriptedProvider(options={"file": str(script)})

    assert caught.value.reason == "bad_options"


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({}, 'exactly one of "steps" or "file"'),
        ({"steps": [], "file": "x.json"}, 'exactly one of "steps" or "file"'),
        ({"step": []}, "step: Extra inputs are not permitted"),
        ({"steps": {"text": "x"}}, "steps: Input should be a valid list"),
        ({"steps": [{"tool_calls": [{"arguments": {}}]}]}, r"steps\.0\.tool_calls\.0\.tool: Field required"),
        (
            {"steps": [{"tool_calls": [{"tool": "t", "arguments": []}]}]},
            r"arguments: Input should be a valid",
        ),
        ({"steps": [{"error": "flaky"}]}, r"steps\.0\.error: Input should be 'transient'"),
        ({"steps": [], "delay_s": -1}, "delay_s: Input should be greater than or equal to 0"),
        ({"steps": [{"text": 3}]}, r"steps\.0\.text: Input should be a valid string"),
    ],
)
def test_bad_options_are_a_config_error(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ModelConfigError, match=match) as caught:
        ScriptedProvider(options=options)

    assert caught.value.kind == "config"
    assert str(caught.value).startswith("invalid options for the scripted model provider: ")


async def test_closing_twice_is_harmless_and_forgets_the_injected_error_counts() -> None:
    provider = ScriptedProvider(options={"steps": [{"text": "ok", "error": "transient", "error_times": 1}]})
    with pytest.raises(ModelTransientError):
        await provider.complete(make_request(1))
    assert (await provider.complete(make_request(1))).text == "ok"  # counted: the error is spent

    await provider.aclose()
    await provider.aclose()

    with pytest.raises(ModelTransientError):  # nothing counted survives the close
        await provider.complete(make_request(1))


async def test_fixed_steps_are_rendered_once_not_per_call() -> None:
    steps = [{"text": f"step {i}", "tool_calls": [{"tool": "t.x", "arguments": {"i": i}}]} for i in range(3)]
    provider = ScriptedProvider(options={"steps": steps})

    first, again = [await provider.complete(make_request(2)) for _ in range(2)]

    # The benchmark drives thousands of steps a second through here: no parsing or rendering per call.
    assert first.tool_calls is again.tool_calls and first.text == "step 1"


# -- re-asks: the answer follows the conversation, not the count of model calls -------------------


async def test_a_step_asked_again_after_its_answer_was_lost_gets_the_same_decision() -> None:
    provider = ScriptedProvider(options=SCRIPT)
    first_ask = make_request(1)

    first = await provider.complete(first_ask)
    # A fault between the answer and its commit: the run counted the step, the log kept nothing.
    again = await provider.complete(asked_again(first_ask))
    twice_more = await provider.complete(asked_again(first_ask, times=3))

    assert again == first == twice_more
    assert [c.call_id for c in again.tool_calls] == ["call_1_0", "call_1_1"]
    # The next decision comes once the first one is in the conversation, whatever the step count.
    after = answered(asked_again(first_ask, times=3), again, '{"status": "shipped"}', "{}")
    assert (await provider.complete(after)).text == "Order shipped."
    assert (await provider.complete(answered(after, await provider.complete(after)))).text == EXHAUSTED_TEXT


async def test_a_later_step_asked_again_keeps_its_place_in_the_script() -> None:
    steps = [{"text": f"s{i}", "tool_calls": [{"tool": "t.x", "arguments": {}}]} for i in range(1, 4)]
    provider = ScriptedProvider(options={"steps": [*steps, {"text": "done"}]})
    request = make_request(3)

    assert (await provider.complete(request)).text == "s3"
    lost = await provider.complete(asked_again(request))

    assert lost.text == "s3" and lost.tool_calls[0].call_id == "call_3_0"
    assert (await provider.complete(answered(asked_again(request), lost, "{}"))).text == "done"


async def test_an_answer_without_tool_calls_asked_past_counts_as_a_decision() -> None:
    # A final answer the runtime refused (output validation) is followed by its note: the model is
    # asked for the next decision, as it would be with request.step alone.
    provider = ScriptedProvider(options={"steps": [{"text": "draft"}, {"text": "final"}]})
    first = make_request(1)
    draft = await provider.complete(first)
    corrective = dataclasses.replace(
        answered(first, draft),
        messages=(*answered(first, draft).messages, Message(role="user", content="[agentrt] invalid")),
    )

    assert (await provider.complete(corrective)).text == "final"
    assert (await provider.complete(asked_again(first))).text == "draft"  # nothing answered yet


async def test_a_new_turn_of_a_session_starts_the_script_again() -> None:
    provider = ScriptedProvider(options=SCRIPT)
    turn = make_request(1)
    earlier_turn = (Message(role="user", content="A099"), Message(role="assistant", content="Order shipped."))
    second_turn = dataclasses.replace(turn, messages=(turn.messages[0], *earlier_turn, *turn.messages[1:]))

    assert (await provider.complete(second_turn)).tool_calls[0].call_id == "call_1_0"
