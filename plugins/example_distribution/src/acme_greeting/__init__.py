"""An example third-party tool plugin: the tool ``greeting.hello``.

Installed, it is found through the entry-point group ``agentrt.tools`` (see pyproject.toml).
"""

from __future__ import annotations

import pydantic

from agentrt.toolhost import SideEffect, Tool, ToolContext, ToolHostConfig, hookimpl, tool

__all__ = ["HelloArgs", "agentrt_register_tools", "hello"]


class HelloArgs(pydantic.BaseModel):
    """Arguments of greeting.hello."""

    model_config = pydantic.ConfigDict(extra="forbid")
    name: str = pydantic.Field(min_length=1, max_length=100, description="Who to greet.")


@tool(
    name="greeting.hello",
    description="Returns {'greeting': 'Hello, NAME!'}.",
    side_effect=SideEffect.READ_ONLY,
    idempotent=True,
    concurrency_safe=True,
    timeout=5.0,
)
def hello(args: HelloArgs, ctx: ToolContext) -> dict[str, str]:
    """Greet someone."""
    return {"greeting": f"Hello, {args.name}!"}


@hookimpl
def agentrt_register_tools(config: ToolHostConfig) -> list[Tool]:
    """This plugin's one tool."""
    return [hello]
