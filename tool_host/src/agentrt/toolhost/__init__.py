"""agentrt tool host: the plugin SDK teams import, and the host process that serves their tools.

Writing a plugin::

    import pydantic
    from agentrt.toolhost import SideEffect, ToolContext, hookimpl, tool

    class EchoArgs(pydantic.BaseModel):
        text: str

    @tool(name="text.echo", description="Echo the text.", side_effect=SideEffect.READ_ONLY)
    async def echo(args: EchoArgs, ctx: ToolContext) -> dict[str, str]:
        return {"text": args.text}

    @hookimpl
    def agentrt_register_tools(config):
        return [echo]

Serving it: ``python -m agentrt.toolhost --plugin my_plugin --listen 127.0.0.1:0``.
"""

from __future__ import annotations

import os as _os

# gRPC's C core (>= 1.65) logs INFO lines through absl unless GRPC_VERBOSITY is set, and reads it
# once, at `import grpc`: restore its documented ERROR default before anything imports grpc, so
# stderr stays ours (JSON lines under --log-format json). A GRPC_VERBOSITY of the user's wins.
_os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from agentrt.toolhost._cli import main
from agentrt.toolhost._config import ToolHostConfig
from agentrt.toolhost._context import CancellationSignal, ToolContext
from agentrt.toolhost._errors import (
    DuplicateToolError,
    ErrorCode,
    InvalidInput,
    PermanentError,
    PluginError,
    ToolCancelled,
    ToolError,
    TransientError,
    Unauthorized,
)
from agentrt.toolhost._host import SERVICE_NAME, ToolHost
from agentrt.toolhost._ledger_pg_config import PgLedgerOptions
from agentrt.toolhost._ledger_retention import LedgerRetention
from agentrt.toolhost._plugins import collect_tools, get_plugin_manager, load_plugin
from agentrt.toolhost._sdk import (
    CLEANUP,
    SET_VARIABLES,
    Intent,
    IntentScope,
    SideEffect,
    Tool,
    ToolFunction,
    canonical_json,
    tool,
    with_cleanup,
    with_variables,
)
from agentrt.toolhost._validate import MAX_JSON_DEPTH, JsonBoundsError, loads_bounded
from agentrt.toolhost.hookspecs import hookimpl, hookspec

__all__ = [
    "CLEANUP",
    "MAX_JSON_DEPTH",
    "SERVICE_NAME",
    "SET_VARIABLES",
    "CancellationSignal",
    "DuplicateToolError",
    "ErrorCode",
    "Intent",
    "IntentScope",
    "InvalidInput",
    "JsonBoundsError",
    "LedgerRetention",
    "PermanentError",
    "PgLedgerOptions",
    "PluginError",
    "SideEffect",
    "Tool",
    "ToolCancelled",
    "ToolContext",
    "ToolError",
    "ToolFunction",
    "ToolHost",
    "ToolHostConfig",
    "TransientError",
    "Unauthorized",
    "canonical_json",
    "collect_tools",
    "get_plugin_manager",
    "hookimpl",
    "hookspec",
    "load_plugin",
    "loads_bounded",
    "main",
    "tool",
    "with_cleanup",
    "with_variables",
]
