"""agentrt tool host: the plugin SDK teams import, and the host process that serves their tools.

Writing a plugin::

    import pydantic
    from tool_host import SideEffect, ToolContext, hookimpl, tool

    class EchoArgs(pydantic.BaseModel):
        text: str

    @tool(name="text.echo", description="Echo the text.", side_effect=SideEffect.READ_ONLY)
    async def echo(args: EchoArgs, ctx: ToolContext) -> dict[str, str]:
        return {"text": args.text}

    @hookimpl
    def agentrt_register_tools(config):
        return [echo]

Serving it: ``python -m tool_host --plugin my_plugin --listen 127.0.0.1:0``.
"""

from __future__ import annotations

from tool_host._cli import main
from tool_host._config import ToolHostConfig
from tool_host._context import CancellationSignal, ToolContext
from tool_host._errors import (
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
from tool_host._host import SERVICE_NAME, ToolHost
from tool_host._ledger_retention import LedgerRetention
from tool_host._plugins import collect_tools, get_plugin_manager, load_plugin
from tool_host._sdk import SideEffect, Tool, ToolFunction, canonical_json, tool
from tool_host._validate import MAX_JSON_DEPTH, JsonBoundsError, loads_bounded
from tool_host.hookspecs import hookimpl, hookspec

__all__ = [
    "MAX_JSON_DEPTH",
    "SERVICE_NAME",
    "CancellationSignal",
    "DuplicateToolError",
    "ErrorCode",
    "InvalidInput",
    "JsonBoundsError",
    "LedgerRetention",
    "PermanentError",
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
]
