"""Values exchanged between the engine and model providers, and the provider interface.

Every value is a frozen, keyword-only dataclass so that it can cross layers (engine, providers,
plugins) without anyone mutating what another layer holds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "Message",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "ModelSpecData",
    "ModelToolCall",
    "ToolDef",
]


@dataclass(frozen=True, kw_only=True)
class ToolDef:
    """A tool the model may call.

    Attributes:
        name: Tool name as the tool host knows it (may contain dots, e.g. ``orders.lookup``).
        description: What the tool does, for the model.
        input_schema: JSON schema of the arguments object.
    """

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class ModelToolCall:
    """A tool call the model asked for.

    Attributes:
        call_id: Call id, unique within the run.
        tool: Tool name (the tool host's name, never a provider's wire alias).
        arguments_json: Arguments object as JSON text, exactly as the model produced it.
    """

    call_id: str
    tool: str
    arguments_json: str


@dataclass(frozen=True, kw_only=True)
class Message:
    """One message of the conversation history, with OpenAI-like roles.

    Attributes:
        role: ``system`` (instructions), ``user``, ``assistant`` or ``tool`` (a tool result).
        content: Text of the message; for ``tool`` the result as JSON text.
        tool_calls: Tool calls of an ``assistant`` message.
        tool_call_id: For ``tool`` messages, the call the result answers.
    """

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: tuple[ModelToolCall, ...] = ()
    tool_call_id: str = ""


@dataclass(frozen=True, kw_only=True)
class ModelSpecData:
    """Which provider and model to use, with the provider's options.

    Attributes:
        provider: Provider plugin name, e.g. ``scripted`` or ``openai``.
        name: Model name as the provider knows it.
        options: Provider options from the agent config or inline spec; JSON values, never secrets.
    """

    provider: str
    name: str
    options: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class ModelRequest:
    """One model call of a run.

    Attributes:
        run_id: Run the call belongs to.
        step: 1-based index of this model call within the run.
        spec: Provider, model and options.
        messages: System message first (instructions), then the user input, then the history.
        tools: Tools the model may call.
        timeout_s: Time the call may take, already ``min(call timeout, run deadline - reserve)``;
            ``None`` means the provider's default. Providers must honour it.
        purpose: ``"step"`` for a model step, ``"summary"`` for a summary of history a step's
            context window leaves out (``context.summariser = "model"``).
    """

    run_id: str
    step: int
    spec: ModelSpecData
    messages: tuple[Message, ...]
    tools: tuple[ToolDef, ...]
    timeout_s: float | None
    purpose: Literal["step", "summary"] = "step"


@dataclass(frozen=True, kw_only=True)
class ModelResponse:
    """The model's decision for one step.

    Attributes:
        text: Text of the answer; the final answer when there are no tool calls.
        tool_calls: Tool calls asked for, in order.
        input_tokens: Prompt tokens the call consumed.
        output_tokens: Completion tokens the call produced.
        finish_reason: Why the model stopped, in OpenAI's vocabulary (``stop``, ``tool_calls``,
            ``length``, ``content_filter``), or what the provider reported.
        response_id: The provider's id of its response (OpenAI ``chatcmpl-...``, Anthropic
            ``msg_...``), or "" when it gave none.
        request_id: The provider's id of the HTTP request (``x-request-id``, ``request-id``), or "".
    """

    text: str
    tool_calls: tuple[ModelToolCall, ...]
    input_tokens: int
    output_tokens: int
    finish_reason: str
    response_id: str = ""
    request_id: str = ""


@runtime_checkable
class ModelProvider(Protocol):
    """A model backend; one instance per (provider, model, options), shared by all runs."""

    async def complete(
        self, request: ModelRequest, *, on_text_delta: Callable[[str], None] | None = None
    ) -> ModelResponse:
        """Ask the model for the next decision of a run.

        Args:
            request: The call, with its history, tools and timeout.
            on_text_delta: Called with fragments of the answer text as they become known; the
                fragments concatenate to ``ModelResponse.text``. Must not block. When the call
                raises instead, the fragments it passed belong to a failed attempt.

        Returns:
            The model's decision.

        Raises:
            ModelError: A subclass saying whether a retry may help.
        """
        ...

    async def aclose(self) -> None:
        """Release connections and other resources. Idempotent."""
        ...
