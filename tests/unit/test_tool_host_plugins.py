"""Unit tests of plugin loading: entry points, --plugin modules and files, duplicates, preview."""

from __future__ import annotations

import importlib.metadata
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pluggy
import pydantic
import pytest

import agentrt.plugins.demo_tools
from agentrt.toolhost import (
    DuplicateToolError,
    PluginError,
    SideEffect,
    Tool,
    ToolContext,
    ToolHostConfig,
    collect_tools,
    get_plugin_manager,
    hookimpl,
    load_plugin,
    tool,
)
from agentrt.toolhost._plugins import preview

EXAMPLE_FILE = Path(agentrt.plugins.__file__).parent / "example_plugin_file.py"
CONFIG = ToolHostConfig(data_dir=Path("unused"))


class PingArgs(pydantic.BaseModel):
    pass


def _tool(name: str) -> Tool:
    def ping(args: PingArgs, ctx: ToolContext) -> str:
        return "pong"

    return tool(name=name, description="ping", side_effect=SideEffect.READ_ONLY)(ping)


def _plugin(name: str, *tool_names: str, **hooks: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    tools = [_tool(t) for t in tool_names]

    @hookimpl
    def agentrt_register_tools(config: ToolHostConfig) -> list[Tool]:
        return tools

    module.agentrt_register_tools = agentrt_register_tools  # type: ignore[attr-defined]
    for hook, fn in hooks.items():
        setattr(module, hook, hookimpl(fn))
    return module


class _FakeEntryPoint:
    def __init__(self, name: str, plugin: Any, group: str = "agentrt.tools") -> None:
        self.name = name
        self.group = group
        self.value = f"fake:{name}"
        self._plugin = plugin

    def load(self) -> Any:
        if isinstance(self._plugin, BaseException):
            raise self._plugin
        return self._plugin


class _FakeDistribution:
    def __init__(self, *entry_points: _FakeEntryPoint) -> None:
        self.entry_points = list(entry_points)
        self.metadata = {"name": "fake-dist"}


@pytest.fixture
def fake_entrypoints(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[_FakeEntryPoint]]:
    """Replace every installed distribution with one whose entry points the test fills in."""
    entry_points: list[_FakeEntryPoint] = []
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: [_FakeDistribution(*entry_points)])
    yield entry_points


@pytest.fixture
def module_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Write importable plugin modules into tmp_path; removes them from sys.modules afterwards."""
    written: list[str] = []
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(name: str, source: str) -> str:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        written.append(name)
        return name

    try:
        yield write
    finally:
        for name in written:
            sys.modules.pop(name, None)


# --- entry points ----------------------------------------------------------------------------


def test_entry_point_plugins_are_loaded(fake_entrypoints: list[_FakeEntryPoint]) -> None:
    fake_entrypoints.append(_FakeEntryPoint("alpha", _plugin("alpha_mod", "a.one", "a.two")))
    fake_entrypoints.append(_FakeEntryPoint("other", _plugin("other_mod", "x.y"), group="something.else"))
    pm = get_plugin_manager()
    assert pm.has_plugin("alpha") and not pm.has_plugin("other")
    assert sorted(collect_tools(pm, CONFIG)) == ["a.one", "a.two"]


def test_entry_points_can_be_switched_off(fake_entrypoints: list[_FakeEntryPoint]) -> None:
    fake_entrypoints.append(_FakeEntryPoint("alpha", _plugin("alpha_mod", "a.one")))
    assert collect_tools(get_plugin_manager(entrypoints=False), CONFIG) == {}


def test_a_blocked_entry_point_is_not_loaded(fake_entrypoints: list[_FakeEntryPoint]) -> None:
    fake_entrypoints.append(_FakeEntryPoint("alpha", _plugin("alpha_mod", "a.one")))
    fake_entrypoints.append(_FakeEntryPoint("beta", _plugin("beta_mod", "b.one")))
    assert sorted(collect_tools(get_plugin_manager(blocked=["alpha"]), CONFIG)) == ["b.one"]


def test_an_entry_point_that_fails_to_import_is_named(fake_entrypoints: list[_FakeEntryPoint]) -> None:
    fake_entrypoints.append(_FakeEntryPoint("broken", ImportError("no module named nope")))
    with pytest.raises(PluginError, match=r"'broken'.*ImportError: no module named nope") as info:
        get_plugin_manager()
    assert info.value.plugin == "broken"


def test_the_shipped_demo_plugin_is_an_installed_entry_point() -> None:
    pm = get_plugin_manager()  # the real installed metadata
    assert pm.get_plugin("demo_tools") is agentrt.plugins.demo_tools
    tools = collect_tools(pm, CONFIG)
    assert {"orders.lookup", "refund.issue", "sleep.wait", "noop.echo"} <= set(tools)


# --- --plugin MODULE_OR_FILE -----------------------------------------------------------------


def test_plugin_by_module_name(module_on_path: Any) -> None:
    name = module_on_path(
        "th_test_plugin_mod",
        """
        from __future__ import annotations
        import pydantic
        from agentrt.toolhost import SideEffect, ToolContext, hookimpl, tool

        class Args(pydantic.BaseModel):
            n: int

        @tool(name="mod.double", description="x2", side_effect=SideEffect.READ_ONLY)
        def double(args: Args, ctx: ToolContext) -> int:
            return args.n * 2

        @hookimpl
        def agentrt_register_tools(config):
            return [double]
        """,
    )
    pm = get_plugin_manager(plugins=[name], entrypoints=False)
    assert pm.has_plugin(name)
    tools = collect_tools(pm, CONFIG)
    assert list(tools) == ["mod.double"]
    args, _ = tools["mod.double"].parse_arguments('{"n": 4}')
    assert tools["mod.double"].fn(args, ToolContext(idempotency_key="k")) == 8


def test_plugin_by_file_path() -> None:
    pm = get_plugin_manager(plugins=[str(EXAMPLE_FILE)], entrypoints=False)
    assert pm.has_plugin(str(EXAMPLE_FILE))
    tools = collect_tools(pm, CONFIG)
    assert list(tools) == ["text.upper"]
    args, _ = tools["text.upper"].parse_arguments('{"text": "abc"}')
    assert tools["text.upper"].fn(args, ToolContext(idempotency_key="k")) == {"text": "ABC"}


def test_the_same_file_loads_once() -> None:
    first = load_plugin(str(EXAMPLE_FILE))
    assert load_plugin(str(EXAMPLE_FILE))[1] is first[1]


def test_a_plugin_given_twice_registers_once() -> None:
    pm = get_plugin_manager(
        plugins=["agentrt.plugins.demo_tools", "agentrt.plugins.demo_tools"], entrypoints=True
    )
    assert len(collect_tools(pm, CONFIG)) == 5


def test_an_unknown_module_is_a_plugin_error() -> None:
    with pytest.raises(PluginError, match=r"cannot import plugin 'no_such_plugin_xyz'.*ModuleNotFoundError"):
        get_plugin_manager(plugins=["no_such_plugin_xyz"], entrypoints=False)


def test_a_missing_file_is_a_plugin_error(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match="does not exist"):
        get_plugin_manager(plugins=[str(tmp_path / "nope.py")], entrypoints=False)


def test_a_file_that_raises_on_import_is_a_plugin_error(tmp_path: Path) -> None:
    bad = tmp_path / "raises.py"
    bad.write_text("raise RuntimeError('kaput')\n")
    with pytest.raises(PluginError, match=r"raises.py.*RuntimeError: kaput"):
        get_plugin_manager(plugins=[str(bad)], entrypoints=False)
    # A failed import leaves nothing half-registered behind.
    assert not [m for m in sys.modules if m.startswith("agentrt_plugin_") and m.endswith("raises")]


def test_a_misspelled_hook_fails_check_pending(module_on_path: Any) -> None:
    name = module_on_path(
        "th_test_typo_mod",
        """
        from agentrt.toolhost import hookimpl

        @hookimpl
        def agentrt_register_tool(config):
            return []
        """,
    )
    with pytest.raises(PluginError, match="th_test_typo_mod"):
        get_plugin_manager(plugins=[name], entrypoints=False)


def test_a_hook_with_unknown_arguments_is_rejected(module_on_path: Any) -> None:
    name = module_on_path(
        "th_test_badargs_mod",
        """
        from agentrt.toolhost import hookimpl

        @hookimpl
        def agentrt_register_tools(config, nonsense):
            return []
        """,
    )
    with pytest.raises(PluginError, match="th_test_badargs_mod"):
        get_plugin_manager(plugins=[name], entrypoints=False)


# --- collecting tools ------------------------------------------------------------------------


def _pm(*modules: types.ModuleType) -> pluggy.PluginManager:
    pm = get_plugin_manager(entrypoints=False)
    for module in modules:
        pm.register(module, name=module.__name__)
    return pm


def test_duplicate_tool_names_across_plugins_name_both() -> None:
    pm = _pm(_plugin("first_plugin", "dup.tool", "ok.one"), _plugin("second_plugin", "dup.tool"))
    with pytest.raises(DuplicateToolError) as info:
        collect_tools(pm, CONFIG)
    message = str(info.value)
    assert "'dup.tool'" in message and "'first_plugin'" in message and "'second_plugin'" in message
    assert (info.value.first_plugin, info.value.second_plugin) == ("first_plugin", "second_plugin")


def test_a_plugin_listing_a_tool_twice_is_a_duplicate() -> None:
    with pytest.raises(DuplicateToolError, match="provided twice by plugin 'solo'"):
        collect_tools(_pm(_plugin("solo", "same.name", "same.name")), CONFIG)


def test_register_tools_receives_the_config() -> None:
    seen: list[ToolHostConfig] = []
    module = types.ModuleType("cfg_plugin")

    @hookimpl
    def agentrt_register_tools(config: ToolHostConfig) -> list[Tool]:
        seen.append(config)
        return []

    module.agentrt_register_tools = agentrt_register_tools  # type: ignore[attr-defined]
    config = ToolHostConfig(data_dir=Path("/data"), options={"k": "v"})
    assert collect_tools(_pm(module), config) == {}
    assert seen == [config]


def test_a_plugin_that_raises_while_registering_is_named() -> None:
    module = types.ModuleType("raising_plugin")

    @hookimpl
    def agentrt_register_tools(config: ToolHostConfig) -> list[Tool]:
        raise KeyError("missing option")

    module.agentrt_register_tools = agentrt_register_tools  # type: ignore[attr-defined]
    with pytest.raises(PluginError, match=r"'raising_plugin' failed to register its tools: KeyError"):
        collect_tools(_pm(module), CONFIG)


def test_a_plugin_returning_something_else_than_tools_is_named() -> None:
    module = types.ModuleType("junk_plugin")

    @hookimpl
    def agentrt_register_tools(config: ToolHostConfig) -> Any:
        return ["not a tool"]

    module.agentrt_register_tools = agentrt_register_tools  # type: ignore[attr-defined]
    with pytest.raises(PluginError, match=r"'junk_plugin'.*list of Tool"):
        collect_tools(_pm(module), CONFIG)


# --- preview ---------------------------------------------------------------------------------


def test_preview_falls_back_to_a_default_sentence() -> None:
    pm = _pm(_plugin("quiet", "q.tool"))
    assert preview(pm, "q.tool", {"b": 2, "a": 1}) == 'Would call q.tool with {"a":1,"b":2}'


def test_preview_takes_the_first_answer() -> None:
    def silent(tool: str, arguments: dict[str, Any]) -> str | None:
        return None

    def loud(tool: str) -> str | None:  # implementations may take a subset of the arguments
        return f"{tool} will do things"

    pm = _pm(_plugin("silent", agentrt_preview_tool=silent), _plugin("loud", agentrt_preview_tool=loud))
    assert preview(pm, "x.tool", {}) == "x.tool will do things"


def test_the_demo_plugin_previews_refunds() -> None:
    pm = get_plugin_manager(plugins=["agentrt.plugins.demo_tools"], entrypoints=False)
    summary = preview(pm, "refund.issue", {"order_id": "A101", "amount": 5, "reason": "late"})
    assert "Grace Hopper" in summary and "5.00 EUR" in summary
    assert "does not exist" in preview(pm, "refund.issue", {"order_id": "Z9", "amount": 5, "reason": "x"})
    assert preview(pm, "orders.lookup", {"order_id": "A100"}).startswith("Would call orders.lookup")
