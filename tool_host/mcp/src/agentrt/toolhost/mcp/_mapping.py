"""Pure parts: an MCP tool definition's hash, its effect class, and a result's JSON value."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

import jsonschema

from agentrt.toolhost import PermanentError, SideEffect, canonical_json
from agentrt.toolhost.mcp._config import Effect, ServerConfig

__all__ = [
    "MAX_DESCRIPTION_CHARS",
    "MAX_RESULT_CHARS",
    "MAX_SCHEMA_CHARS",
    "Contract",
    "ToolDefinition",
    "contract_of",
    "definition_hash",
    "result_value",
]

MAX_DESCRIPTION_CHARS = 8192  # what a server's description may take in a model's context
MAX_SCHEMA_CHARS = 64 * 1024
MAX_RESULT_CHARS = 4 * 1024 * 1024  # a result's text; more is refused, not kept

_EFFECTS = {
    Effect.READ_ONLY: SideEffect.READ_ONLY,
    Effect.WRITE: SideEffect.WRITE,
    Effect.DESTRUCTIVE: SideEffect.DESTRUCTIVE,
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToolDefinition:
    """What a server said about one tool in ``tools/list`` (the parts that make its contract)."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    annotations: Mapping[str, Any]

    @classmethod
    def from_listing(cls, tool: Mapping[str, Any]) -> ToolDefinition:
        """From one ``tools/list`` entry (by alias, as on the wire).

        Raises:
            ValueError: The entry is malformed or over the size caps.
        """
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError("a tool without a name")
        description = tool.get("description") or ""
        if not isinstance(description, str) or len(description) > MAX_DESCRIPTION_CHARS:
            raise ValueError(f"tool {name!r}: description over {MAX_DESCRIPTION_CHARS} characters")
        schema = tool.get("inputSchema")
        schema = {"type": "object"} if schema is None else schema
        if not isinstance(schema, Mapping) or len(json.dumps(schema)) > MAX_SCHEMA_CHARS:
            raise ValueError(
                f"tool {name!r}: inputSchema is not an object of at most {MAX_SCHEMA_CHARS} chars"
            )
        try:
            jsonschema.Draft202012Validator.check_schema(dict(schema))
        except jsonschema.SchemaError as exc:
            raise ValueError(
                f"tool {name!r}: inputSchema is not a JSON Schema ({exc.message[:200]})"
            ) from None
        annotations = tool.get("annotations")
        annotations = {} if annotations is None else annotations
        if not isinstance(annotations, Mapping):
            raise ValueError(f"tool {name!r}: annotations is not an object")
        return cls(
            name=name, description=description, input_schema=dict(schema), annotations=dict(annotations)
        )


def definition_hash(definition: ToolDefinition) -> str:
    """A stable hash of a tool's definition: name, description, inputSchema, annotations.

    Canonical JSON (sorted keys), sha256, hex: the tool's ``version`` and what
    ``approved_versions`` pins.
    """
    text = canonical_json(
        {
            "name": definition.name,
            "description": definition.description,
            "inputSchema": definition.input_schema,
            "annotations": definition.annotations,
        }
    )
    return hashlib.sha256(text.encode()).hexdigest()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Contract:
    """How the host serves an MCP tool: its effect class and approval."""

    side_effect: SideEffect
    idempotent: bool
    requires_approval: bool
    timeout_s: float


def contract_of(
    definition: ToolDefinition, server: ServerConfig, *, default_timeout_s: float = 30.0
) -> Contract:
    """The effect class from the annotations, only ever stricter, then the config's overrides.

    ``readOnlyHint: true`` is READ_ONLY; ``destructiveHint: false`` is WRITE; anything else
    (no annotations, or ``destructiveHint`` missing or true) is DESTRUCTIVE and needs approval.
    ``idempotentHint: true`` marks it idempotent. The server's table overrides that, and the
    tool's own ``tools.<name>`` table overrides the server's.
    """
    hints = definition.annotations
    if hints.get("readOnlyHint") is True:
        effect, approval = SideEffect.READ_ONLY, False
    elif hints.get("destructiveHint") is False:
        effect, approval = SideEffect.WRITE, False
    else:
        effect, approval = SideEffect.DESTRUCTIVE, True
    idempotent = hints.get("idempotentHint") is True
    timeout = default_timeout_s
    tool = server.tools.get(definition.name)
    for layer in (server, tool):
        if layer is None:
            continue
        if layer.effect is not None:
            effect = _EFFECTS[layer.effect]
            # An operator naming the effect decides approval too, unless said apart.
            approval = effect is SideEffect.DESTRUCTIVE
        if layer.idempotent is not None:
            idempotent = layer.idempotent
        if layer.requires_approval is not None:
            approval = layer.requires_approval
        if layer.timeout_s is not None:
            timeout = layer.timeout_s
    return Contract(side_effect=effect, idempotent=idempotent, requires_approval=approval, timeout_s=timeout)


def result_value(result: Mapping[str, Any]) -> Any:
    """The JSON value of a successful ``tools/call`` result (by alias, as on the wire).

    ``structuredContent`` when present; else the text of a single text block, parsed when it is
    JSON; else ``{"content": [...]}`` with the blocks as sent.

    Raises:
        PermanentError: An ``isError`` result (its text is the message), or one over the size cap.
    """
    content = result.get("content") or []
    if result.get("isError"):
        texts = [b.get("text", "") for b in content if isinstance(b, Mapping) and b.get("type") == "text"]
        message = "; ".join(t for t in texts if isinstance(t, str))[:2000] or "the MCP tool reported an error"
        raise PermanentError(message, details={"mcp": "isError"})
    structured = result.get("structuredContent")
    value: Any
    if structured is not None:
        value = structured
    elif (
        len(content) == 1
        and isinstance(content[0], Mapping)
        and content[0].get("type") == "text"
        and isinstance(content[0].get("text"), str)
    ):
        text = content[0]["text"]
        try:
            value = json.loads(text)
        except ValueError:
            value = text
    else:
        value = {"content": list(content)}
    if len(json.dumps(value)) > MAX_RESULT_CHARS:
        raise PermanentError(
            f"the MCP result is over {MAX_RESULT_CHARS} characters", details={"mcp": "too_large"}
        )
    return value
