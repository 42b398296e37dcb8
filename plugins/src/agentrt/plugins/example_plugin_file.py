"""An example plugin in a single file, loaded with ``--plugin path/to/example_plugin_file.py``.

It serves one tool, ``text.upper``.
"""

from __future__ import annotations

import pydantic

from agentrt.toolhost import SideEffect, Tool, ToolContext, ToolHostConfig, hookimpl, tool


class UpperArgs(pydantic.BaseModel):
    """Arguments of text.upper."""

    text: str = pydantic.Field(max_length=10_000, description="Text to upper-case.")


@tool(
    name="text.upper",
    description="Return the text in upper case.",
    side_effect=SideEffect.READ_ONLY,
    idempotent=True,
    concurrency_safe=True,
    timeout=5.0,
)
def upper(args: UpperArgs, ctx: ToolContext) -> dict[str, str]:
    """Upper-case the text."""
    return {"text": args.text.upper()}


@hookimpl
def agentrt_register_tools(config: ToolHostConfig) -> list[Tool]:
    """This file's one tool."""
    return [upper]
