"""The ``scripted`` model provider: decisions, placeholders, exhaustion, injected errors, options."""

from __future__ import annotations

import asyncio
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
    return ModelRequest(
        run_id=run_id,
        step=step,
        spec=ModelSpecData(provider="scripted", name="demo", options=options or {}),
        messages=(Message(role="system", content="You help."), Message(role="user", content=user)),
        tools=(),
        timeout_s=timeout_s,
    )


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
    request = make_request(2, user="u" * 31)
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


async def test_aclose_is_idempotent() -> None:
    provider = ScriptedProvider(options=SCRIPT)

    await provider.aclose()
    await provider.aclose()


async def test_thousands_of_steps_per_second() -> None:
    steps = [
        {"text": f"step {i}", "tool_calls": [{"tool": "t.x", "arguments": {"i": i}}]} for i in range(100)
    ]
    provider = ScriptedProvider(options={"steps": steps})
    requests = [make_request(1 + i % 101) for i in range(2000)]
    started = time.perf_counter()

    for request in requests:
        await provider.complete(request)

    # Locally ~100k steps/s; the bound only catches per-call parsing or validation creeping in.
    assert time.perf_counter() - started < 1.0
