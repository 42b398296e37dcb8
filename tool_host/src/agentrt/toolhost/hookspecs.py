"""Hook specifications: the contract between the tool host and its plugins.

A plugin is a module (or object) with functions marked ``@hookimpl`` whose names
match the specs below. Register it under the entry-point group
``agentrt.tools`` or pass it with ``--plugin MODULE_OR_FILE``::

    from agentrt.toolhost import hookimpl

    @hookimpl
    def agentrt_register_tools(config):
        return [lookup, refund]

Hooks are called with keyword arguments; an implementation may accept a subset
of them, so new arguments can be added later without breaking plugins.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from agentrt.toolhost._config import ToolHostConfig
    from agentrt.toolhost._sdk import Tool

__all__ = [
    "agentrt_preview_tool",
    "agentrt_query_operation",
    "agentrt_register_tools",
    "hookimpl",
    "hookspec",
]

#: The pluggy project and entry-point group of tool plugins. Each hook family (tools, models,
#: policies, auth) has its own, so a process loads only the plugins it runs and each manager's
#: ``check_pending()`` rejects a misspelled hook of its family.
PROJECT_NAME = "agentrt.tools"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
"""Marks hook specifications of tool plugins."""

hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
"""Marks a plugin's hook implementations; plugins import it from ``agentrt.toolhost``."""


@hookspec
def agentrt_register_tools(config: ToolHostConfig) -> list[Tool]:
    """Return the tools this plugin provides. Called once at startup.

    Build each tool with the ``@tool`` decorator. A tool's function may be sync
    (it then runs in a worker thread) or async (it runs on the host's event loop).
    Tool names must be unique across all plugins of a host; a duplicate stops
    the host at startup with an error naming both plugins.

    Do not start work or write files here: the host may still refuse to start.
    Open files lazily, under ``config.data_dir``.

    :param config: Host configuration (read-only): ``data_dir`` and ``options``
        from ``--set KEY=VALUE``.
    :return: The plugin's tools (an empty list is fine).
    """
    raise NotImplementedError  # pragma: no cover - specs have no body


@hookspec(firstresult=True)
def agentrt_query_operation(
    tool: str, idempotency_key: str, data_dir: Path, config: ToolHostConfig
) -> dict[str, Any] | None:
    """Say whether a write with this idempotency key took effect, from the tool's own store.

    Asked only when the ledger cannot tell: its entry is RUNNING from an earlier host
    life that died while the tool ran, or this host stopped the tool where it stood (a
    cancel, a deadline or a shutdown cut it: "effect unknown"), and the runtime asks
    what happened. This is what ``supports_query`` promises: a
    tool that keeps its effects keyed by idempotency key can settle the question.
    Implementing this hook is what makes the host report ``supports_query`` for the
    plugin's tools (unless a tool declares it false).

    Stops at first non-None result.

    :param tool: Tool name.
    :param idempotency_key: The call's key.
    :param data_dir: The host's data directory.
    :param config: The configuration ``agentrt_register_tools`` got: the plugin's
        ``options`` (``--set KEY=VALUE``), e.g. where the tool's own store is.
    :return: ``{"status": "succeeded", "result": <JSON value>}``, ``{"status": "absent"}``
        (no effect happened), or ``None`` when this plugin cannot tell.
    """


@hookspec(firstresult=True)
def agentrt_preview_tool(tool: str, arguments: dict[str, Any]) -> str | None:
    """Describe the impact a call would have, for the person asked to approve it.

    Must not cause any effect. Return ``None`` for tools this plugin does not
    describe; the host then falls back to "Would call <tool> with <arguments>".

    Stops at first non-None result.

    :param tool: Name of the tool to be called.
    :param arguments: The call's arguments object, already validated against the
        tool's input schema.
    :return: One paragraph an approver can read, or ``None``.
    """
    raise NotImplementedError  # pragma: no cover - specs have no body
