"""Soft loop exits (R6.2): repeated identical calls, repeated errors, steps with no new fact,
and answers flip-flopping between two states with no new fact in between (S000).

Pure bookkeeping folded from events; the decider asks :meth:`LoopTracker.detected`
before each new model step and before each call.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field

from agentrt.server.core._events import ToolErrorCode
from agentrt.server.core._json import loads_bounded
from agentrt.server.core._keys import canonical_json

# Errors that say "this call, as made, will not work": repeating them is a loop.
NON_RETRYABLE_CODES = frozenset(
    {
        ToolErrorCode.INVALID_INPUT,
        ToolErrorCode.PERMANENT,
        ToolErrorCode.UNKNOWN_TOOL,
        ToolErrorCode.NOT_ALLOWED,
        ToolErrorCode.RESULT_TOO_LARGE,
    }
)


_ANSWERS_KEPT = 16  # enough for any flip-flop threshold a config may set (bounded: validated)


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopPolicy:
    """Thresholds; 0 turns a check off."""

    max_identical_calls: int = 3
    max_repeated_errors: int = 3
    max_steps_without_new_fact: int = 6
    max_flip_flops: int = 2  # A, B, A, B with no new fact: two full swings


def signature(tool: str, payload_json: str) -> str:
    """Stable identity of (tool, canonical JSON payload); malformed or unbounded JSON is taken as text."""
    try:
        text = canonical_json(loads_bounded(payload_json or "null"))
    except ValueError:
        text = payload_json
    return hashlib.sha256(f"{tool}\x00{text}".encode()).hexdigest()[:32]


@dataclass(slots=True)
class LoopTracker:
    """What the loop checks need, derived from the log alone."""

    calls: Counter[str] = field(default_factory=Counter)
    call_names: dict[str, str] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    error_names: dict[str, str] = field(default_factory=dict)
    facts: set[str] = field(default_factory=set)
    new_fact_this_step: bool = False
    steps_without_new_fact: int = 0  # completed steps, not counting the current one
    model_steps_seen: int = 0
    # Signatures of the model's answers (text and calls) since the last new fact, newest last.
    answers: list[str] = field(default_factory=list)

    def on_call_started(self, tool: str, arguments_json: str) -> None:
        key = signature(tool, arguments_json)
        self.calls[key] += 1
        self.call_names[key] = tool

    def on_result(self, tool: str, result_json: str) -> None:
        fact = signature(tool, result_json)
        if fact not in self.facts:
            self.facts.add(fact)
            self.new_fact_this_step = True

    def on_error(self, tool: str, code: ToolErrorCode, message: str) -> None:
        if code in NON_RETRYABLE_CODES:
            key = signature(tool, json.dumps([code.value, message]))
            self.errors[key] += 1
            self.error_names[key] = f"{tool}: {code.value}"

    def on_answer(self, text: str, calls: list[tuple[str, str]]) -> None:
        """The model answered: what it said and asked for, call ids aside (they differ every step)."""
        shape = json.dumps([text, [[tool, signature(tool, arguments)] for tool, arguments in calls]])
        self.answers.append(signature("answer", shape))
        del self.answers[:-_ANSWERS_KEPT]

    def on_model_step(self, *, first: bool) -> None:
        """A model step starts: the previous step either brought a new fact or it did not."""
        if self.new_fact_this_step:
            # A new fact: what the model says next may rightly differ. The answer that earned the
            # fact stays, as the state a flip-flop would go back to.
            del self.answers[:-1]
        if not first:
            self.steps_without_new_fact = self._through_current_step()
        self.new_fact_this_step = False
        self.model_steps_seen += 1

    def _through_current_step(self) -> int:
        return 0 if self.new_fact_this_step else self.steps_without_new_fact + 1

    def would_repeat(self, policy: LoopPolicy, tool: str, arguments_json: str) -> str | None:
        """Detail when starting this call would make it the N-th identical one."""
        limit = policy.max_identical_calls
        if limit and self.calls[signature(tool, arguments_json)] + 1 >= limit:
            return f"identical_call: {tool} with the same arguments {limit} times"
        return None

    def detected(self, policy: LoopPolicy) -> str | None:
        """Detail of a loop seen so far, or None."""
        limit = policy.max_repeated_errors
        if limit:
            for key, count in self.errors.items():
                if count >= limit:
                    return f"repeated_error: {self.error_names[key]} {count} times"
        flip_flop = self._flip_flop(policy.max_flip_flops)
        if flip_flop is not None:
            return flip_flop
        limit = policy.max_steps_without_new_fact
        stalled = self._through_current_step() if self.model_steps_seen else 0
        if limit and stalled >= limit:
            return f"no_progress: {stalled} steps without a new fact"
        return None

    def _flip_flop(self, swings: int) -> str | None:
        """Detail when the last answers alternate A, B, A, B ... (``swings`` times) with no new fact."""
        if not swings or len(self.answers) < 2 * swings:
            return None
        tail = self.answers[-2 * swings :]
        first, second = tail[0], tail[1]
        if first != second and all(a == (first if i % 2 == 0 else second) for i, a in enumerate(tail)):
            return f"flip_flop: the answer alternated between two states {swings} times with no new fact"
        return None
