"""The ``scripted`` provider: deterministic decisions from a script, for demos, tests and benchmarks.

Options (validated once, when the provider is created)::

    {"steps": [{"text": "...", "tool_calls": [{"tool": "orders.lookup", "arguments": {...}}]},
               {"text": "final answer {input}"}],
     "delay_s": 0.0}

or ``{"file": "path/to/script.json"}`` (relative to the working directory) with the same
``{"steps": [...]}`` object in the file, read once.

The decision for a request is chosen by what the model sees, as a deterministic model's would be:
the script's position ``n`` is one past the latest decision of its own the conversation shows
(its tool call ids, ``call_{n}_{index}`` with index from 0, say which position it was), counting
the answers without tool calls since; with none shown, one past the assistant messages shown;
never past ``request.step``. So a step asked again after its answer was lost (a fault between the
answer and its commit counts a step spent, and the next request's ``step`` is one higher) gets
the same decision again, never the next one. A summary request (``purpose="summary"``) gets
``steps[request.step - 1]``. Past the end the decision is the final answer
``(script exhausted)``. ``{input}`` in texts and string argument values is replaced by the first
user message. Per step, for tests:

- ``"deltas": true`` streams the text word by word to ``on_text_delta`` before returning;
- ``"error": "transient" | "permanent" | "auth"`` raises the matching :class:`ModelError`, on every
  call or, with ``"error_times": N``, on the first N calls of that step in each run (the count of
  the latest 4096 (run, step) pairs is kept); a transient error carries ``"retry_after_s"`` when
  set;
- ``"delay_s"`` overrides the script-wide delay. Delays honour cancellation and ``timeout_s``.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from ._errors import (
    ModelAuthError,
    ModelConfigError,
    ModelError,
    ModelPermanentError,
    ModelTransientError,
)
from ._tokens import estimate_message_tokens, estimate_tokens
from ._types import ModelProvider, ModelRequest, ModelResponse, ModelToolCall
from .hookspecs import hookimpl

__all__ = ["EXHAUSTED_TEXT", "PROVIDER_NAME", "ScriptedProvider", "position"]

PROVIDER_NAME = "scripted"
#: Final answer given for steps past the end of the script.
EXHAUSTED_TEXT = "(script exhausted)"
_PLACEHOLDER = "{input}"
# A leading run of spaces, then each word with the whitespace after it: fragments join to the text.
_FRAGMENT = re.compile(r"^\s+|\S+\s*")
# The ids this provider gives tool calls: the script position that made them, and the call's index.
_OWN_CALL_ID = re.compile(r"call_([1-9][0-9]{0,8})_[0-9]{1,4}")
# (run, step) pairs whose injected errors are counted ("error_times"); older ones are forgotten.
_MAX_COUNTED = 4096

_ERRORS: dict[str, type[ModelError]] = {
    "transient": ModelTransientError,
    "permanent": ModelPermanentError,
    "auth": ModelAuthError,
}


class _ToolCallOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class _StepOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str = ""
    tool_calls: list[_ToolCallOptions] = Field(default_factory=list)
    deltas: bool = False
    delay_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    error: Literal["transient", "permanent", "auth"] | None = None
    error_times: int | None = Field(default=None, ge=1)
    retry_after_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)


class _ScriptFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: list[_StepOptions]


class _ScriptedOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: list[_StepOptions] | None = None
    file: str | None = Field(default=None, min_length=1)
    delay_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)

    @pydantic.model_validator(mode="after")
    def _one_source(self) -> _ScriptedOptions:
        if (self.steps is None) == (self.file is None):
            raise ValueError('give exactly one of "steps" or "file"')
        return self


def _describe(exc: pydantic.ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in err['loc']) or '(options)'}: {err['msg']}" for err in exc.errors()
    )


def _substitute(value: Any, user_input: str) -> Any:
    if isinstance(value, str):
        return value.replace(_PLACEHOLDER, user_input)
    if isinstance(value, dict):
        return {key: _substitute(item, user_input) for key, item in value.items()}
    if isinstance(value, list):
        return [_substitute(item, user_input) for item in value]
    return value


@dataclass(frozen=True, slots=True)
class _Rendered:
    text: str
    tool_calls: tuple[ModelToolCall, ...]
    fragments: tuple[str, ...]
    output_tokens: int
    finish_reason: str


def _render(step: int, options: _StepOptions, user_input: str | None) -> _Rendered:
    """Build a step's decision; ``user_input=None`` leaves placeholders alone."""
    text = options.text
    calls = []
    for index, call in enumerate(options.tool_calls):
        arguments = call.arguments if user_input is None else _substitute(call.arguments, user_input)
        calls.append(
            ModelToolCall(
                call_id=f"call_{step}_{index}",
                tool=call.tool,
                arguments_json=json.dumps(arguments, separators=(",", ":"), ensure_ascii=False),
            )
        )
    if user_input is not None:
        text = text.replace(_PLACEHOLDER, user_input)
    output = text + "".join(call.tool + call.arguments_json for call in calls)
    return _Rendered(
        text=text,
        tool_calls=tuple(calls),
        fragments=tuple(_FRAGMENT.findall(text)),
        output_tokens=estimate_tokens(output),
        finish_reason="tool_calls" if calls else "stop",
    )


@dataclass(frozen=True, slots=True)
class _Step:
    options: _StepOptions
    # Pre-rendered decision, or None when the step has placeholders and must be rendered per call.
    fixed: _Rendered | None
    delay_s: float


_EXHAUSTED = _render(0, _StepOptions(text=EXHAUSTED_TEXT), None)


class ScriptedProvider:
    """Answers every request from a script, deterministically.

    Args:
        options: The provider options (see the module docstring).

    Raises:
        ModelConfigError: The options or the script file are malformed.
    """

    def __init__(self, *, options: Mapping[str, Any]) -> None:
        try:
            parsed = _ScriptedOptions.model_validate(dict(options))
        except pydantic.ValidationError as exc:
            raise ModelConfigError(
                f"invalid options for the scripted model provider: {_describe(exc)}", reason="bad_options"
            ) from None
        steps = parsed.steps if parsed.steps is not None else self._load_file(parsed.file or "")
        # Parse and pre-render once: the benchmark drives thousands of steps per second through here.
        self._steps = tuple(
            _Step(
                options=step,
                fixed=None if self._has_placeholder(step) else _render(number, step, None),
                delay_s=parsed.delay_s if step.delay_s is None else step.delay_s,
            )
            for number, step in enumerate(steps, start=1)
        )
        self._delay_s = parsed.delay_s
        # (run_id, step) -> calls that raised so far, for "error_times".
        self._failures: dict[tuple[str, int], int] = {}

    @staticmethod
    def _load_file(file: str) -> list[_StepOptions]:
        path = Path(file).expanduser()
        try:
            raw = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ModelConfigError(
                f"cannot read the scripted model's script {str(path)!r}: {exc.strerror or exc}",
                reason="bad_options",
            ) from None
        try:
            return list(_ScriptFile.model_validate_json(raw).steps)
        except pydantic.ValidationError as exc:
            raise ModelConfigError(
                f"invalid script file {str(path)!r} for the scripted model provider: {_describe(exc)}",
                reason="bad_options",
            ) from None

    @staticmethod
    def _has_placeholder(step: _StepOptions) -> bool:
        if _PLACEHOLDER in step.text:
            return True
        return any(_PLACEHOLDER in json.dumps(call.arguments, ensure_ascii=False) for call in step.tool_calls)

    @property
    def step_count(self) -> int:
        """Number of steps in the script."""
        return len(self._steps)

    def __repr__(self) -> str:
        return f"ScriptedProvider(steps={len(self._steps)})"

    async def complete(
        self, request: ModelRequest, *, on_text_delta: Callable[[str], None] | None = None
    ) -> ModelResponse:
        """Return the script's decision for the conversation of ``request`` (see the module docstring).

        Args:
            request: The call; only ``messages``, ``step``, ``purpose``, ``run_id`` and ``timeout_s``
                matter.
            on_text_delta: Receives word fragments of the text when the step has ``"deltas": true``.

        Returns:
            The scripted decision, with estimated token counts.

        Raises:
            ModelTransientError: The step injects a transient error, or the delay exceeds ``timeout_s``.
            ModelPermanentError: The step injects a permanent error, or ``request.step`` is below 1.
            ModelAuthError: The step injects an auth error.
        """
        if request.step < 1:
            raise ModelPermanentError(f"step must be 1 or more, got {request.step}", reason="bad_request")
        number = request.step if request.purpose == "summary" else position(request)
        step = self._steps[number - 1] if number <= len(self._steps) else None
        delay_s = self._delay_s if step is None else step.delay_s
        if delay_s > 0:
            await self._sleep(delay_s, request.timeout_s)
        if step is None:
            rendered = _EXHAUSTED
        else:
            if step.options.error is not None:
                self._maybe_raise(request, number, step.options)
            rendered = (
                step.fixed
                if step.fixed is not None
                else _render(number, step.options, self._user_input(request))
            )
            if step.options.deltas and on_text_delta is not None:
                for fragment in rendered.fragments:
                    on_text_delta(fragment)
        return ModelResponse(
            text=rendered.text,
            tool_calls=rendered.tool_calls,
            input_tokens=estimate_message_tokens(request.messages),
            output_tokens=rendered.output_tokens,
            finish_reason=rendered.finish_reason,
        )

    async def aclose(self) -> None:
        """Nothing to release; idempotent."""
        self._failures.clear()

    @staticmethod
    async def _sleep(delay_s: float, timeout_s: float | None) -> None:
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.sleep(delay_s)
        except TimeoutError:
            raise ModelTransientError(
                f"scripted model call timed out after {timeout_s}s", reason="timeout", timed_out=True
            ) from None

    @staticmethod
    def _user_input(request: ModelRequest) -> str:
        return next((message.content for message in request.messages if message.role == "user"), "")

    def _maybe_raise(self, request: ModelRequest, number: int, step: _StepOptions) -> None:
        if step.error_times is not None:
            key = (request.run_id, number)
            failures = self._failures.pop(key, 0)
            if failures >= step.error_times:
                self._failures[key] = failures
                return
            if len(self._failures) >= _MAX_COUNTED:
                del self._failures[next(iter(self._failures))]  # the least recently counted
            self._failures[key] = failures + 1
        kind = step.error or "permanent"
        error = _ERRORS[kind]
        raise error(
            f"scripted {kind} error at step {number}",
            reason="scripted",
            retry_after_s=step.retry_after_s if error is ModelTransientError else None,
        )


def position(request: ModelRequest) -> int:
    """The script position ``request`` asks for, from the conversation it carries.

    One past the latest decision of this provider's the messages show (by its tool call ids),
    plus the assistant messages after it; with none shown, one past the assistant messages; at
    most ``request.step``, which a lost answer has counted but the conversation does not show.
    """
    answers_since = 0
    for message in reversed(request.messages):
        if message.role == "assistant":
            ids = [call.call_id for call in message.tool_calls]
        elif message.role == "tool":
            ids = [message.tool_call_id]
        else:
            continue
        for call_id in ids:
            own = _OWN_CALL_ID.fullmatch(call_id)
            if own is not None:
                return min(request.step, int(own.group(1)) + 1 + answers_since)
        if message.role == "assistant":
            answers_since += 1
    return min(request.step, 1 + answers_since)


@hookimpl
def agentrt_model_provider(name: str, options: Mapping[str, Any]) -> ModelProvider | None:
    """Create the ``scripted`` provider."""
    if name != PROVIDER_NAME:
        return None
    return ScriptedProvider(options=options)


@hookimpl
def agentrt_model_provider_names() -> list[str]:
    """Declare the ``scripted`` provider."""
    return [PROVIDER_NAME]
