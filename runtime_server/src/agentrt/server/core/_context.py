"""The context window: fit a model step's prompt to the model's context limit, as a recorded decision.

Pure: :func:`plan_window` looks at the history the step will show and returns a
:class:`~agentrt.server.core._events.ContextWindow` saying what to leave out and what to clip;
:func:`windowed_history` applies such a decision. The engine records the decision on the step's
``step.started`` before the model is called, so the request is a function of the log alone: a
replay or a resume after a crash sends the same bytes, whatever the configuration says by then.

The history is cut in *units*: the run's input (always kept); earlier session turns before it
(left out oldest first); after it, one unit per assistant message with the tool results that
answer it, or per note the runtime added. Results stay with the message that asked for them, so
a provider never sees a tool result without its call. Strategies, cheapest loss first:

- ``keep_recent``: leave out the oldest units until the prompt fits, always keeping the last
  ``keep_turns`` units.
- ``clip_tool_results``: first clip the tool results of the older units to ``clip_bytes``, then
  as ``keep_recent``.
- ``summarise``: as ``keep_recent``, and a summariser (a policy hook) stands in for what was left
  out; without one it is ``keep_recent``.

Whatever the strategy, one tool result larger than ``result_share`` of the window is clipped with
a marker (in the prompt only: the log keeps it whole).

Token counts: the provider's own count is the truth, but it is known only after a request (the
usage it reports). So the first step of a run counts conservatively, one token per three UTF-8
bytes (:func:`estimate_tokens`; tokenizers average about four for English, fewer for other
scripts), and every later step scales that estimate by what the provider counted for the run's
previous request against what the runtime estimated for it (:func:`token_scale_permille`, with
a margin). The scale is recorded in the window, so a replay explains the decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from agentrt.server.core._events import ClippedResult, ContextWindow
from agentrt.server.core._state import HistoryEntry
from agentrt.server.core._tokens import TokenCounter, estimate_tokens, scaled_counter, token_scale_permille

__all__ = [
    "ContextPolicy",
    "clip_marker",
    "estimate_tokens",
    "omitted_entries",
    "plan_window",
    "prompt_estimate",
    "scaled_counter",
    "summary_note",
    "token_scale_permille",
    "windowed_history",
    "with_summary",
]

Strategy = Literal["keep_recent", "clip_tool_results", "summarise"]

_MESSAGE_OVERHEAD = 4  # tokens a message costs beyond its text (role, separators), as providers count
SUMMARY_NOTE = "[agentrt] Earlier steps of this run were left out of the context window. Summary: {}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextPolicy:
    """An agent's context window policy (``[agents.<name>.context]``)."""

    strategy: Strategy = "keep_recent"
    keep_turns: int = 2  # the most recent units are kept whole (unless one alone overflows)
    clip_bytes: int = 2048  # an older tool result is cut to this (clip_tool_results)
    result_share: float = 0.25  # one tool result may fill at most this share of the window
    summary_bytes: int = 2000  # room kept for a summary; a longer one is cut


def prompt_estimate(fixed_texts: Sequence[str], history: Sequence[HistoryEntry]) -> int:
    """The byte estimate of a request: its fixed texts (instructions, tool definitions) and history."""
    return sum(estimate_tokens(t) for t in fixed_texts) + sum(
        _entry_tokens(e, estimate_tokens) for e in history
    )


def clip_marker(kept: int, full: int) -> str:
    return (
        f"\n[agentrt: result clipped to its first {kept} of {full} bytes to fit the context window; "
        "the run's log keeps it whole]"
    )


def summary_note(summary: str) -> str:
    return SUMMARY_NOTE.format(summary)


def _clip(text: str, kept: int) -> str:
    data = text.encode()
    return data[:kept].decode(errors="ignore") + clip_marker(kept, len(data))


def _entry_tokens(entry: HistoryEntry, count: TokenCounter) -> int:
    tokens = _MESSAGE_OVERHEAD + count(entry.content)
    for call_id, tool, arguments in entry.tool_calls:
        tokens += count(call_id) + count(tool) + count(arguments)
    return tokens


def _units(history: Sequence[HistoryEntry], start: int) -> list[range]:
    """Index ranges of the units from ``start``: a non-tool entry with the tool entries after it."""
    units: list[range] = []
    begin = start
    for index in range(start + 1, len(history) + 1):
        if index == len(history) or history[index].role != "tool":
            units.append(range(begin, index))
            begin = index
    return [u for u in units if len(u)]


def plan_window(
    history: Sequence[HistoryEntry],
    *,
    input_index: int,
    fixed_tokens: int,
    limit_tokens: int,
    policy: ContextPolicy,
    count: TokenCounter = estimate_tokens,
) -> ContextWindow:
    """What the step's prompt shows of ``history`` to fit ``limit_tokens``.

    Args:
        history: The history the step would show whole.
        input_index: Where the run's input is in it (kept whatever happens).
        fixed_tokens: Tokens of what is sent besides the history (instructions, tool definitions).
        limit_tokens: The model's context limit.
        policy: The agent's strategy and sizes.
        count: Token counter for a text.

    Returns:
        The decision, with the estimated tokens of the prompt it makes (which may still exceed the
        limit when the input and the latest unit alone do: the provider then refuses the call).
    """
    sizes = [_entry_tokens(entry, count) for entry in history]
    full = fixed_tokens + sum(sizes)
    result_cap = max(256, int(limit_tokens * 3 * policy.result_share))  # bytes, at ~3 bytes a token
    clipped: dict[int, int] = {}  # entry index -> bytes kept

    def clip(index: int, kept: int) -> None:
        entry = history[index]
        size = len(entry.content.encode())
        if entry.role == "tool" and size > kept and clipped.get(index, size) > kept:
            clipped[index] = kept
            sizes[index] = _MESSAGE_OVERHEAD + count(_clip(entry.content, kept))

    for index in range(len(history)):
        clip(index, result_cap)  # one oversized result never fills the window, whatever the strategy
    before = list(range(0, input_index))
    units = _units(history, input_index + 1)
    keep = max(1, policy.keep_turns)
    older = units[:-keep] if len(units) > keep else []
    reserve = count("x" * policy.summary_bytes) + _MESSAGE_OVERHEAD if policy.strategy == "summarise" else 0

    def total(omit_before: int, omit_units: int) -> int:
        omitted = sum(sizes[i] for i in before[:omit_before]) + sum(
            sizes[i] for unit in units[:omit_units] for i in unit
        )
        summary = reserve if (omit_before or omit_units) else 0
        return fixed_tokens + sum(sizes) - omitted + summary

    if policy.strategy == "clip_tool_results" and total(0, 0) > limit_tokens:
        for unit in older:
            for index in unit:
                clip(index, policy.clip_bytes)
    omit_before = omit_units = 0
    while total(omit_before, omit_units) > limit_tokens and omit_before < len(before):
        omit_before = min(len(before), omit_before + 2)  # a session turn is a (user, assistant) pair
    while total(omit_before, omit_units) > limit_tokens and omit_units < len(older):
        omit_units += 1
    while total(omit_before, omit_units) > limit_tokens and omit_units < len(units) - 1:
        omit_units += 1  # the recent units too, down to the latest one
    if total(omit_before, omit_units) > limit_tokens:
        for unit in units[omit_units:]:
            for index in unit:
                clip(index, policy.clip_bytes)
    omitted_after = sum(len(unit) for unit in units[:omit_units])
    return ContextWindow(
        strategy=policy.strategy,
        limit_tokens=limit_tokens,
        estimated_tokens=total(omit_before, omit_units),
        full_tokens=full,
        omitted_before_input=omit_before,
        omitted_after_input=omitted_after,
        clipped=tuple(
            ClippedResult(history[i].tool_call_id, kept, len(history[i].content.encode()), i)
            for i, kept in sorted(clipped.items())
            if i >= omit_before and not (input_index < i <= input_index + omitted_after)
        ),
    )


def omitted_entries(
    history: Sequence[HistoryEntry], input_index: int, window: ContextWindow
) -> list[HistoryEntry]:
    """The entries ``window`` leaves out (what a summariser is asked to summarise)."""
    start = input_index + 1
    return [*history[: window.omitted_before_input], *history[start : start + window.omitted_after_input]]


def windowed_history(
    history: Sequence[HistoryEntry], input_index: int, window: ContextWindow | None
) -> list[HistoryEntry]:
    """The history a step shows under ``window`` (all of it when there is none)."""
    if window is None:
        return list(history)
    cuts = {c.entry: c.kept_bytes for c in window.clipped}
    shown = [
        replace(entry, content=_clip(entry.content, cuts[index])) if index in cuts else entry
        for index, entry in enumerate(history)
    ]
    start = input_index + 1
    summary = [HistoryEntry(role="user", content=summary_note(window.summary))] if window.summary else []
    return [
        *shown[window.omitted_before_input : start],
        *summary,
        *shown[start + window.omitted_after_input :],
    ]


def with_summary(window: ContextWindow, summary: str, *, policy: ContextPolicy) -> ContextWindow:
    """``window`` with a summariser's ``summary`` of what it leaves out, cut to ``summary_bytes``
    (the room :func:`plan_window` kept for it)."""
    data = summary.encode()
    if len(data) > policy.summary_bytes:
        summary = data[: policy.summary_bytes].decode(errors="ignore")
    return replace(window, summary=summary)
