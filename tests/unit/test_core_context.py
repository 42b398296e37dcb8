"""The context window (core/_context.py): what a step's prompt keeps, clips or leaves out."""

from __future__ import annotations

import pytest

from agentrt.server.core import (
    ContextPolicy,
    HistoryEntry,
    ModelCompleted,
    RunStarted,
    RunState,
    StepStarted,
    ToolCallRequest,
    ToolCompleted,
    ToolStarted,
    Usage,
    estimate_tokens,
    omitted_entries,
    plan_window,
    scaled_counter,
    token_scale_permille,
    windowed_history,
    with_summary,
)


def history(steps: int, *, result_bytes: int = 300, session_turns: int = 0) -> list[HistoryEntry]:
    """Earlier session turns, the input, then ``steps`` (assistant call, tool result) pairs."""
    entries: list[HistoryEntry] = []
    for turn in range(session_turns):
        entries += [
            HistoryEntry("user", f"earlier question {turn}"),
            HistoryEntry("assistant", f"answer {turn}"),
        ]
    entries.append(HistoryEntry("user", "look up every order"))
    for step in range(steps):
        entries.append(HistoryEntry("assistant", "", tool_calls=((f"c{step}", "orders.lookup", "{}"),)))
        entries.append(HistoryEntry("tool", "r" * result_bytes, tool_call_id=f"c{step}"))
    return entries


def well_formed(shown: list[HistoryEntry]) -> bool:
    """Every tool result follows the assistant message that asked for it."""
    asked: set[str] = set()
    for entry in shown:
        if entry.role == "assistant":
            asked = {c for c, _, _ in entry.tool_calls}
        elif entry.role == "tool" and entry.tool_call_id not in asked:
            return False
    return True


def tokens(entries: list[HistoryEntry]) -> int:
    return sum(
        4 + estimate_tokens(e.content) + sum(estimate_tokens(x) for c in e.tool_calls for x in c)
        for e in entries
    )


def test_a_history_that_fits_is_shown_whole() -> None:
    entries = history(3)
    window = plan_window(entries, input_index=0, fixed_tokens=50, limit_tokens=10_000, policy=ContextPolicy())
    assert (window.omitted_after_input, window.omitted_before_input, window.clipped) == (0, 0, ())
    assert window.estimated_tokens == window.full_tokens <= 10_000
    assert windowed_history(entries, 0, window) == entries


@pytest.mark.parametrize("steps", [4, 10, 40])
def test_keep_recent_leaves_out_the_oldest_steps_keeps_the_input_and_fits(steps: int) -> None:
    entries = history(steps)
    policy = ContextPolicy(keep_turns=2)
    window = plan_window(entries, input_index=0, fixed_tokens=50, limit_tokens=500, policy=policy)
    shown = windowed_history(entries, 0, window)
    assert shown[0] == entries[0]  # the run's input, always
    assert shown[-4:] == entries[-4:]  # the last two steps, whole
    assert window.omitted_after_input == len(entries) - len(shown)
    assert window.omitted_after_input % 2 == 0 and well_formed(shown)
    assert window.estimated_tokens <= 500 and 50 + tokens(shown) == window.estimated_tokens
    assert window.full_tokens > 500


def test_earlier_session_turns_go_first() -> None:
    entries = history(2, session_turns=30)
    window = plan_window(entries, input_index=60, fixed_tokens=0, limit_tokens=400, policy=ContextPolicy())
    assert window.omitted_before_input > 0 and window.omitted_after_input == 0
    shown = windowed_history(entries, 60, window)
    assert shown[-5:] == entries[-5:] and window.estimated_tokens <= 400


def test_one_oversized_result_is_clipped_with_a_marker_whatever_the_strategy() -> None:
    entries = history(1, result_bytes=50_000)
    window = plan_window(entries, input_index=0, fixed_tokens=0, limit_tokens=2_000, policy=ContextPolicy())
    (clipped,) = window.clipped
    assert (clipped.call_id, clipped.entry, clipped.full_bytes) == ("c0", 2, 50_000)
    assert clipped.kept_bytes == int(2_000 * 3 * 0.25)
    shown = windowed_history(entries, 0, window)
    assert shown[2].content.startswith("r" * clipped.kept_bytes)
    assert "clipped to its first 1500 of 50000 bytes" in shown[2].content
    assert entries[2].content == "r" * 50_000  # the history itself (the log) keeps everything


def test_clip_tool_results_clips_older_results_before_leaving_any_step_out() -> None:
    entries = history(6, result_bytes=900)
    policy = ContextPolicy(strategy="clip_tool_results", keep_turns=2, clip_bytes=100, result_share=1.0)
    window = plan_window(entries, input_index=0, fixed_tokens=0, limit_tokens=1_000, policy=policy)
    assert window.omitted_after_input == 0
    assert {c.call_id for c in window.clipped} == {"c0", "c1", "c2", "c3"}  # the last two kept whole
    assert window.estimated_tokens <= 1_000


def test_clip_entries_are_by_position_since_call_ids_repeat_across_steps() -> None:
    entries = [HistoryEntry("user", "go")]
    for _ in range(3):
        entries.append(HistoryEntry("assistant", "", tool_calls=(("call_1", "t", "{}"),)))
        entries.append(HistoryEntry("tool", "x" * 900, tool_call_id="call_1"))
    policy = ContextPolicy(strategy="clip_tool_results", keep_turns=1, clip_bytes=100, result_share=1.0)
    window = plan_window(entries, input_index=0, fixed_tokens=0, limit_tokens=600, policy=policy)
    shown = windowed_history(entries, 0, window)
    assert [c.entry for c in window.clipped] == [2, 4]
    assert shown[-1].content == "x" * 900 and "clipped" in shown[2].content


def test_summarise_keeps_room_for_the_summary_and_shows_it_after_the_input() -> None:
    entries = history(12)
    policy = ContextPolicy(strategy="summarise", keep_turns=2, summary_bytes=300)
    window = plan_window(entries, input_index=0, fixed_tokens=0, limit_tokens=800, policy=policy)
    left_out = omitted_entries(entries, 0, window)
    assert left_out == entries[1 : 1 + window.omitted_after_input]
    window = with_summary(window, "s" * 1000, policy=policy)
    assert window.summary == "s" * 300  # cut to the room kept for it
    shown = windowed_history(entries, 0, window)
    assert shown[0] == entries[0] and "Summary: " + "s" * 300 in shown[1].content
    assert 4 + estimate_tokens(shown[1].content) <= 4 + estimate_tokens("x" * 300) + 40
    assert window.estimated_tokens <= 800 and well_formed(shown)


def test_when_only_the_latest_step_fits_it_alone_is_kept_and_the_estimate_says_so() -> None:
    entries = history(3, result_bytes=3_000)
    window = plan_window(entries, input_index=0, fixed_tokens=0, limit_tokens=200, policy=ContextPolicy())
    shown = windowed_history(entries, 0, window)
    assert shown[0] == entries[0] and shown[1] == entries[-2]  # the input and the latest step only
    assert window.omitted_after_input == 4 and len(window.clipped) == 1
    assert window.estimated_tokens == tokens(shown) <= 200


def test_when_even_the_latest_step_overflows_its_results_are_cut_to_clip_bytes() -> None:
    entries = history(3, result_bytes=3_000)
    policy = ContextPolicy(clip_bytes=64)
    window = plan_window(entries, input_index=0, fixed_tokens=0, limit_tokens=100, policy=policy)
    (clipped,) = window.clipped
    assert clipped.kept_bytes == 64 and window.omitted_after_input == 4
    assert window.estimated_tokens == tokens(windowed_history(entries, 0, window))


def test_the_plan_is_deterministic() -> None:
    entries = history(20, result_bytes=700)
    policy = ContextPolicy(strategy="clip_tool_results")
    plans = {
        plan_window(entries, input_index=0, fixed_tokens=10, limit_tokens=900, policy=policy)
        for _ in range(3)
    }
    assert len(plans) == 1


# -- the provider's count calibrates the estimate -----------------------------------------------


@pytest.mark.parametrize(
    ("provider", "estimated", "permille"),
    [
        (1000, 1000, 1100),  # the estimate was right: a tenth of margin
        (1500, 1000, 1650),  # a heavier tokenizer: counted up
        (800, 1000, 880),
        (100, 1000, 750),  # a suspiciously low count: never below three quarters of the estimate
        (9000, 1000, 4000),  # nor more than four times it
        (0, 1000, 0),  # no count (a provider that reports none)
        (500, 63, 0),  # too small a request to learn from
    ],
)
def test_the_token_scale_follows_the_providers_count_within_bounds(
    provider: int, estimated: int, permille: int
) -> None:
    assert token_scale_permille(provider_tokens=provider, estimated_tokens=estimated) == permille


def test_a_scaled_counter_scales_the_byte_estimate_and_zero_is_the_estimate() -> None:
    text = "x" * 300  # 100 tokens by the estimate
    assert scaled_counter(0)(text) == estimate_tokens(text) == 100
    assert scaled_counter(1650)(text) == 165
    assert scaled_counter(750)(text) == 75


def test_the_state_learns_the_scale_from_a_model_step_and_keeps_the_last_known_one() -> None:
    state = RunState(run_id="r")
    for event in (
        RunStarted(agent_name="a", input="hi"),
        StepStarted(step=1),
        ModelCompleted(
            step=1,
            text="",
            tool_calls=(ToolCallRequest("c1", "t", "{}"),),
            usage_before=Usage(),
            usage_after=Usage(model_steps=1, input_tokens=1500),
            prompt_estimate_tokens=1000,
        ),
    ):
        state.apply(event)
    assert state.token_scale_permille == 1650
    state.apply(ToolStarted(step=2, call_id="c1", tool="t", idempotency_key="k"))
    state.apply(ToolCompleted(step=2, call_id="c1", tool="t", result_json="{}"))
    state.apply(StepStarted(step=2))
    state.apply(ModelCompleted(step=2, text="done", usage_after=Usage(model_steps=2, input_tokens=1500)))
    assert state.token_scale_permille == 1650  # a step with no estimate (an older log) changes nothing
