"""Serve the tools of MCP servers from an agentrt tool host (distribution ``agentrt-toolhost-mcp``).

``agentrt toolhost --config host.toml`` with ``[mcp_servers.<id>]`` tables (``command``/``args``/
``env`` for stdio, ``url``/``headers`` for Streamable HTTP) loads this plugin: each server's tools
are served as ``<id>.<tool>``, under the host's ledger, validation, deadlines and cancellation.
See ``docs/guides/mcp.md``.
"""

from __future__ import annotations

from agentrt.toolhost.mcp._config import (
    Effect,
    McpConfig,
    McpConfigError,
    McpSettings,
    ServerConfig,
    ToolConfig,
    ToolOverride,
    load_config,
    resolve_headers,
)
from agentrt.toolhost.mcp._connection import backoff_s
from agentrt.toolhost.mcp._mapping import Contract, ToolDefinition, contract_of, definition_hash, result_value
from agentrt.toolhost.mcp._plugin import (
    IDEMPOTENCY_META_KEY,
    McpArguments,
    McpTool,
    ToolGuard,
    agentrt_register_tools,
    build_tools,
)

__all__ = [
    "IDEMPOTENCY_META_KEY",
    "Contract",
    "Effect",
    "McpArguments",
    "McpConfig",
    "McpConfigError",
    "McpSettings",
    "McpTool",
    "ServerConfig",
    "ToolConfig",
    "ToolDefinition",
    "ToolGuard",
    "ToolOverride",
    "agentrt_register_tools",
    "backoff_s",
    "build_tools",
    "contract_of",
    "definition_hash",
    "load_config",
    "resolve_headers",
    "result_value",
]
