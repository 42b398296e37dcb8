"""Loading plugins and collecting their tools."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import importlib.util
import logging
import re
import sys
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pluggy

from agentrt.toolhost import hookspecs
from agentrt.toolhost._config import ToolHostConfig
from agentrt.toolhost._errors import DuplicateToolError, PluginError
from agentrt.toolhost._sdk import Tool, canonical_json

__all__ = [
    "ENTRYPOINT_GROUP",
    "answers_queries",
    "collect_tools",
    "get_plugin_manager",
    "load_plugin",
    "preview",
    "query_answerers",
]

#: Entry-point group of tool plugins (only tool hosts load it, never the runtime).
ENTRYPOINT_GROUP = hookspecs.PROJECT_NAME

_log = logging.getLogger(__name__)


def load_plugin(spec: str) -> tuple[str, types.ModuleType]:
    """Import a plugin given as a module name or as a path to a ``.py`` file.

    Args:
        spec: ``package.module`` or ``path/to/plugin.py``.

    Returns:
        The name to register the plugin under, and the module.

    Raises:
        PluginError: The module or file cannot be found or fails to import.
    """
    path = Path(spec)
    if spec.endswith(".py") or path.is_file():
        return _load_file(path)
    try:
        return spec, importlib.import_module(spec)
    except Exception as exc:
        raise PluginError(f"cannot import plugin {spec!r}: {type(exc).__name__}: {exc}", plugin=spec) from exc


def _load_file(path: Path) -> tuple[str, types.ModuleType]:
    name = str(path)
    if not path.is_file():
        raise PluginError(f"plugin file {name!r} does not exist", plugin=name)
    resolved = path.resolve()
    # A stable, unique module name, so two files called plugin.py do not collide.
    module_name = "agentrt_plugin_" + re.sub(r"\W", "_", str(resolved.with_suffix("")))
    if module_name in sys.modules:
        return name, sys.modules[module_name]
    module_spec = importlib.util.spec_from_file_location(module_name, resolved)
    if module_spec is None or module_spec.loader is None:
        raise PluginError(f"cannot load plugin file {name!r}", plugin=name)
    module = importlib.util.module_from_spec(module_spec)
    # pydantic resolves postponed annotations through sys.modules, so register before executing.
    sys.modules[module_name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise PluginError(
            f"cannot import plugin file {name!r}: {type(exc).__name__}: {exc}", plugin=name
        ) from exc
    return name, module


def get_plugin_manager(
    *,
    plugins: Sequence[str] = (),
    entrypoints: bool = True,
    blocked: Sequence[str] = (),
) -> pluggy.PluginManager:
    """Build a fresh plugin manager with the tool host hookspecs and the given plugins.

    Args:
        plugins: Extra plugins, each a module name or a path to a ``.py`` file (``--plugin``).
        entrypoints: Also load every plugin of the entry-point group ``agentrt.tools``.
        blocked: Plugin names (entry-point names or ``plugins`` items) not to load.

    Returns:
        A new :class:`pluggy.PluginManager`; there is no global one.

    Raises:
        PluginError: A plugin fails to import, or implements a hook that does not exist
            or with wrong arguments.
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    for name in blocked:
        pm.set_blocked(name)
    try:
        if entrypoints:
            _load_entrypoints(pm)
        for spec in plugins:
            if pm.is_blocked(spec):
                continue
            name, module = load_plugin(spec)
            if pm.is_registered(module):
                # E.g. --plugin agentrt.plugins.demo_tools while the entry point loaded it already.
                _log.info("plugin %r is already registered as %r", spec, pm.get_name(module))
                continue
            try:
                pm.register(module, name=name)
            except (ValueError, pluggy.PluginValidationError) as exc:
                raise PluginError(f"cannot register plugin {name!r}: {exc}", plugin=name) from exc
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        bad = pm.get_name(exc.plugin) or str(getattr(exc.plugin, "__name__", exc.plugin))
        raise PluginError(f"invalid plugin {bad!r}: {exc}", plugin=bad) from exc
    return pm


def _load_entrypoints(pm: pluggy.PluginManager) -> None:
    # One entry point at a time, so an import failure names the plugin at fault.
    names = sorted(
        {
            ep.name
            for dist in importlib.metadata.distributions()
            for ep in dist.entry_points
            if ep.group == ENTRYPOINT_GROUP
        }
    )
    for name in names:
        try:
            pm.load_setuptools_entrypoints(ENTRYPOINT_GROUP, name=name)
        except pluggy.PluginValidationError:
            raise
        except Exception as exc:
            raise PluginError(
                f"cannot load entry-point plugin {name!r} ({ENTRYPOINT_GROUP}): {type(exc).__name__}: {exc}",
                plugin=name,
            ) from exc


def collect_tools(pm: pluggy.PluginManager, config: ToolHostConfig) -> dict[str, Tool]:
    """Ask every plugin for its tools, once.

    Args:
        pm: The plugin manager.
        config: Passed to each ``agentrt_register_tools`` implementation.

    Returns:
        Tools by name, each with ``supports_query`` decided (see :func:`answers_queries`): a tool
        that leaves it unset supports queries when its own plugin implements the query hook.

    Raises:
        DuplicateToolError: Two plugins (or one plugin twice) provide the same name.
        PluginError: A plugin raised, or returned something other than a list of tools.
    """
    tools: dict[str, Tool] = {}
    owners: dict[str, str] = {}
    kwargs: dict[str, Any] = {"config": config}
    # Called one implementation at a time (in registration order) to know which plugin gave which tool.
    impls = sorted(pm.hook.agentrt_register_tools.get_hookimpls(), key=_registration_order(pm))
    for impl in impls:
        plugin = impl.plugin_name
        try:
            result = impl.function(**{arg: kwargs[arg] for arg in impl.argnames})
        except Exception as exc:
            raise PluginError(
                f"plugin {plugin!r} failed to register its tools: {type(exc).__name__}: {exc}", plugin=plugin
            ) from exc
        if result is None:
            continue
        if not isinstance(result, list | tuple) or not all(isinstance(t, Tool) for t in result):
            raise PluginError(
                f"plugin {plugin!r}: agentrt_register_tools must return a list of Tool objects", plugin=plugin
            )
        for item in result:
            if item.name in owners:
                raise DuplicateToolError(tool=item.name, first_plugin=owners[item.name], second_plugin=plugin)
            owners[item.name] = plugin
            tools[item.name] = item
    answerers = query_answerers(pm)
    for name, item in tools.items():
        # Unset: only the tool's own plugin is taken to answer for it. Declared: any plugin may.
        plugin_answers = owners[name] in answerers if item.supports_query is None else bool(answerers)
        tools[name] = dataclasses.replace(
            item, supports_query=answers_queries(item, plugin_answers=plugin_answers)
        )
    return tools


def query_answerers(pm: pluggy.PluginManager) -> set[str]:
    """The plugins implementing ``agentrt_query_operation``."""
    return {impl.plugin_name for impl in pm.hook.agentrt_query_operation.get_hookimpls()}


def answers_queries(tool: Tool, *, plugin_answers: bool) -> bool:
    """Whether GetOperation can answer for ``tool`` after a host died while it ran (supports_query).

    Args:
        tool: The tool; its ``supports_query`` is what its author declared (None: not said).
        plugin_answers: A plugin implementing the query hook can answer for it.

    Returns:
        False when declared False. Else True for a read-only or idempotent tool (the ledger's own
        answer is "run it again") or when a plugin answers; a tool declared True that nobody can
        answer for is reported False, with a warning: a promise nobody keeps would leave a run
        waiting in UNKNOWN_OUTCOME for an answer that never comes.
    """
    if tool.supports_query is False:
        return False
    if tool.rerun_after_crash or plugin_answers:
        return True
    if tool.supports_query:
        _log.warning(
            "tool %s declares supports_query but no plugin implements agentrt_query_operation; "
            "reporting supports_query=false",
            tool.name,
        )
    return False


def _registration_order(pm: pluggy.PluginManager) -> Any:
    order = {name: index for index, (name, _) in enumerate(pm.list_name_plugin())}
    return lambda impl: order.get(impl.plugin_name, len(order))


def preview(pm: pluggy.PluginManager, tool: str, arguments: Mapping[str, Any]) -> str:
    """Return the impact summary of a call: the first plugin's answer, or a default sentence.

    Args:
        pm: The plugin manager.
        tool: Tool name.
        arguments: Validated arguments object.

    Returns:
        One paragraph for an approver.
    """
    summary: str | None = pm.hook.agentrt_preview_tool(tool=tool, arguments=dict(arguments))
    if summary:
        return summary
    return f"Would call {tool} with {canonical_json(dict(arguments))}"
