"""The tool plugin: the configured MCP servers' tools as :class:`~agentrt.toolhost.Tool` objects.

The host's ledger, argument validation, deadlines and cancellation wrap every call as for any
plugin tool. The plugin implements no ``agentrt_query_operation``: MCP has no query by key, so
a host that died while an MCP write ran leaves it in UNKNOWN_OUTCOME for a person.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import re
import threading
from collections.abc import Mapping
from typing import Any

import jsonschema
import pydantic
from mcp_types import INVALID_PARAMS

from agentrt.toolhost import (
    InvalidInput,
    PermanentError,
    SideEffect,
    Tool,
    ToolContext,
    ToolHostConfig,
    TransientError,
    Unauthorized,
    hookimpl,
    loads_bounded,
)
from agentrt.toolhost.mcp._config import McpConfig, load_config, resolve_headers
from agentrt.toolhost.mcp._connection import McpLoop, ServerConnection, SessionLost
from agentrt.toolhost.mcp._mapping import ToolDefinition, contract_of, definition_hash, result_value
from mcp.shared.exceptions import MCPError

__all__ = [
    "IDEMPOTENCY_META_KEY",
    "McpArguments",
    "McpTool",
    "ToolGuard",
    "agentrt_register_tools",
    "build_tools",
]

IDEMPOTENCY_META_KEY = "io.agentrt/idempotency-key"
"""The ``params._meta`` key carrying the call's idempotency key (next to ``traceparent``)."""

_log = logging.getLogger("agentrt.toolhost.mcp")
_TOOL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


class McpArguments(pydantic.BaseModel):
    """The validated arguments object of an MCP tool (validated by its JSON Schema, not a model)."""

    value: dict[str, Any] = pydantic.Field(default_factory=dict)


class ToolGuard:
    """The rug-pull guard of one server: the definition hash each tool was approved with.

    A tool is refused while its current definition is not the one the host first listed (or,
    with ``approved_versions``, not one of those): until an operator approves it by config.
    """

    def __init__(self, *, server_id: str, config: McpConfig, counters: collections.Counter[str]) -> None:
        self._server_id = server_id
        self._config = config.servers[server_id]
        self._counters = counters
        self._lock = threading.Lock()
        self.approved: dict[str, str] = {}  # tool -> hash first listed
        self.current: dict[str, str] = {}  # tool -> hash of the latest listing
        self._listed = False

    def on_listing(self, definitions: list[ToolDefinition]) -> None:
        """Each connection's listing: the first one approves, later ones are checked against it."""
        if self._listed:
            self.relisted(definitions)
        else:
            self._listed = True
            self.first_listing(definitions)

    def first_listing(self, definitions: list[ToolDefinition]) -> None:
        """Record the hashes of the host's first listing; unpinned ones are approved as listed."""
        with self._lock:
            for definition in definitions:
                digest = definition_hash(definition)
                self.current[definition.name] = digest
                pin = self._pin(definition.name)
                if pin is None or digest in pin:
                    self.approved[definition.name] = digest
                else:
                    self._counters["mcp_tool_unapproved"] += 1
                    _log.warning(
                        "MCP tool %s.%s: definition %s is not in approved_versions; refused until approved",
                        self._server_id,
                        definition.name,
                        digest,
                    )

    def relisted(self, definitions: list[ToolDefinition]) -> None:
        """A reconnect's listing: a changed definition is logged and counted, and refused."""
        with self._lock:
            seen = {d.name: definition_hash(d) for d in definitions}
            for name in list(self.current):
                digest = seen.get(name, "")
                if digest != self.current[name]:
                    self._counters["mcp_tool_changed"] += 1
                    _log.warning(
                        "MCP tool %s.%s changed: definition %s, was %s; refused until approved by config",
                        self._server_id,
                        name,
                        digest or "(removed)",
                        self.current[name],
                    )
                self.current[name] = digest

    def _pin(self, tool: str) -> tuple[str, ...] | None:
        override = self._config.tools.get(tool)
        return override.approved_versions if override is not None else None

    def check(self, tool: str) -> None:
        """Raise the typed refusal unless ``tool``'s current definition is approved.

        Raises:
            Unauthorized: not approved (``details["reason"]`` says which way).
        """
        with self._lock:
            current = self.current.get(tool, "")
            approved = self.approved.get(tool)
        if approved is not None and current == approved:
            return
        self._counters["mcp_tool_refused"] += 1
        reason = "mcp_tool_not_approved" if approved is None else "mcp_tool_changed"
        raise Unauthorized(
            f"MCP tool {self._server_id}.{tool}: its definition {current or '(removed)'} is not approved; "
            f"an operator adds it to mcp_servers.{self._server_id}.tools.{tool}.approved_versions",
            details={"reason": reason, "server": self._server_id, "tool": tool, "version": current},
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class McpTool(Tool):
    """A :class:`Tool` whose input schema is the MCP server's ``inputSchema``."""

    mcp_schema: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False)

    def input_schema(self) -> dict[str, Any]:
        """The MCP ``inputSchema``, as the server listed it."""
        return dict(self.mcp_schema)

    def parse_arguments(self, arguments_json: str) -> tuple[pydantic.BaseModel, Any]:
        """Parse (bounded) and validate against the MCP ``inputSchema``.

        Raises:
            InvalidInput: not JSON, not an object, or against the schema (``details["errors"]``).
        """
        text = arguments_json if arguments_json.strip() else "{}"
        try:
            raw = loads_bounded(text)
        except ValueError as exc:
            error = {"type": "json_invalid", "loc": [], "msg": f"arguments: {exc}"}
            raise InvalidInput(f"arguments: {exc}", details={"errors": [error]}) from None
        if not isinstance(raw, dict):
            error = {"type": "object_type", "loc": [], "msg": "arguments must be a JSON object"}
            raise InvalidInput("arguments must be a JSON object", details={"errors": [error]})
        validator = jsonschema.Draft202012Validator(dict(self.mcp_schema))
        try:
            problems = sorted(validator.iter_errors(raw), key=lambda e: str(list(e.absolute_path)))[:20]
        except Exception as exc:  # a $ref nowhere (never fetched), an unknown format: the server's fault
            raise PermanentError(
                f"the input schema of {self.name!r} cannot be applied ({type(exc).__name__})"
            ) from None
        if problems:
            errors = [
                {"type": str(p.validator), "loc": list(p.absolute_path), "msg": p.message[:500]}
                for p in problems
            ]
            raise InvalidInput(
                f"arguments do not match the input schema of {self.name!r} ({len(errors)} error(s))",
                details={"errors": errors},
            )
        return McpArguments.model_construct(value=raw), raw


def _tool_of(
    *,
    server_id: str,
    definition: ToolDefinition,
    config: McpConfig,
    connection: ServerConnection,
    loop: McpLoop,
    guard: ToolGuard,
) -> McpTool:
    contract = contract_of(definition, config.servers[server_id])
    rerun = contract.idempotent or contract.side_effect is SideEffect.READ_ONLY
    remote = definition.name

    async def invoke(args: McpArguments, ctx: ToolContext) -> Any:
        meta: dict[str, Any] = {IDEMPOTENCY_META_KEY: ctx.idempotency_key}
        if ctx.traceparent:
            meta["traceparent"] = ctx.traceparent
        try:
            # The guard checks once a session is up: against the listing of that very session.
            call = connection.call(
                remote, args.value, meta=meta, deadline=ctx.deadline, check=lambda: guard.check(remote)
            )
            result = await loop.call(call)
        except SessionLost as exc:
            if exc.sent and not rerun:
                # Never re-sent: the write may have landed. The runtime reads "effect unknown".
                raise TransientError(
                    str(exc), details={"effect": "unknown", "transport_lost": True}
                ) from None
            raise TransientError(str(exc), details={"transport_lost": exc.sent}) from None
        except TimeoutError:
            details: dict[str, Any] = {"deadline_exceeded": True}
            if not rerun:
                details["effect"] = "unknown"
            raise TransientError("timeout: the MCP request timed out", details=details) from None
        except MCPError as exc:
            if exc.code == INVALID_PARAMS:
                raise InvalidInput(f"the MCP server refused the arguments: {exc.message[:500]}") from None
            raise PermanentError(
                f"MCP error {exc.code}: {exc.message[:500]}", details={"mcp_code": exc.code}
            ) from None
        except pydantic.ValidationError:
            raise PermanentError("the MCP server sent a malformed result") from None
        return result_value(result)

    return McpTool(
        name=f"{server_id}.{remote}",
        description=definition.description,
        side_effect=contract.side_effect,
        idempotent=contract.idempotent,
        # No query hook answers for an MCP write; reads and idempotent tools are simply re-run.
        supports_query=rerun,
        requires_approval=contract.requires_approval,
        timeout=contract.timeout_s,
        version=definition_hash(definition),
        fn=invoke,
        args_model=McpArguments,
        mcp_schema=definition.input_schema,
    )


def build_tools(config: McpConfig, *, counters: collections.Counter[str]) -> list[Tool]:
    """Connect to every configured server, list its tools, and return them as host tools.

    Raises:
        McpConfigError: a header reference cannot be resolved.
        RuntimeError: a server cannot be reached or listed at startup (named; no secret shown).
    """
    if not config.servers:
        return []
    # httpx2 logs each request's URL at INFO: noise per call, and a URL's query is the operator's.
    logging.getLogger("httpx2").setLevel(max(logging.WARNING, logging.getLogger("httpx2").level))
    loop = McpLoop()
    tools: list[Tool] = []
    for server_id, server in config.servers.items():
        headers = resolve_headers(server_id, server.headers)
        guard = ToolGuard(server_id=server_id, config=config, counters=counters)
        connection = ServerConnection(
            server_id=server_id,
            config=server,
            headers=headers,
            on_listing=guard.on_listing,
            counters=counters,
        )
        try:
            definitions = loop.run(connection.start(), timeout=server.connect_timeout_s + 5)
        except Exception as exc:
            raise RuntimeError(
                f"MCP server {server_id}: cannot connect and list its tools ({type(exc).__name__})"
            ) from None
        for definition in definitions:
            if not _TOOL_NAME_RE.match(definition.name):
                _log.warning(
                    "MCP server %s: tool name %r cannot be served; skipped", server_id, definition.name
                )
                continue
            tools.append(
                _tool_of(
                    server_id=server_id,
                    definition=definition,
                    config=config,
                    connection=connection,
                    loop=loop,
                    guard=guard,
                )
            )
        _log.info("MCP server %s (%s): serving %d tool(s)", server_id, server.transport, len(definitions))
    return tools


@hookimpl
def agentrt_register_tools(config: ToolHostConfig) -> list[Tool]:
    """The tools of the servers in the host config file's ``[mcp_servers.<id>]`` tables."""
    mcp_config = load_config(config.file)  # McpConfigError: the host stops with its message
    return build_tools(mcp_config, counters=config.counters)
