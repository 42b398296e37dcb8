"""Plugin manager factory and ModelRegistry: built-ins, entry points, caching, unknown providers, closing."""

from __future__ import annotations

import asyncio
import importlib.metadata
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pluggy
import pytest

from agentrt.server.models import (
    DEFAULT_MODEL_PLUGINS,
    ENTRYPOINT_GROUP,
    AnthropicProvider,
    ModelConfigError,
    ModelProvider,
    ModelRegistry,
    ModelRequest,
    ModelResponse,
    ModelSpecData,
    OpenAIProvider,
    ScriptedProvider,
    get_model_plugin_manager,
    hookimpl,
)
from agentrt.toolhost import hookimpl as tool_hookimpl

SCRIPT = {"steps": [{"text": "hi"}]}


def spec(
    provider: str = "scripted", name: str = "demo", options: Mapping[str, Any] | None = None
) -> ModelSpecData:
    return ModelSpecData(provider=provider, name=name, options=SCRIPT if options is None else options)


class EchoProvider:
    def __init__(self, options: Mapping[str, Any], *, fail_close: bool = False) -> None:
        self.options = options
        self.closed = 0
        self.fail_close = fail_close

    async def complete(
        self, request: ModelRequest, *, on_text_delta: Callable[[str], None] | None = None
    ) -> ModelResponse:
        return ModelResponse(
            text="echo", tool_calls=(), input_tokens=1, output_tokens=1, finish_reason="stop"
        )

    async def aclose(self) -> None:
        self.closed += 1
        if self.fail_close:
            raise OSError(f"close failed {self.options.get('n')}")


class EchoPlugin:
    """A third-party model plugin, as an entry point would provide it."""

    def __init__(self) -> None:
        self.created: list[EchoProvider] = []

    @hookimpl
    def agentrt_model_provider(self, name: str, options: Mapping[str, Any]) -> ModelProvider | None:
        if name != "echo":
            return None
        provider = EchoProvider(options, fail_close=bool(options.get("fail_close")))
        self.created.append(provider)
        return provider

    @hookimpl
    def agentrt_model_provider_names(self) -> list[str]:
        return ["echo"]


class ToolPlugin:
    """A module with hooks of two families: its tool hook (the tool SDK's marker) is not the model
    manager's business."""

    @tool_hookimpl
    def agentrt_register_tools(self, config: object) -> list[object]:
        return []


class ToolHookAsModelHook:
    """A tool hook marked with the model marker: an unknown model hook."""

    @hookimpl
    def agentrt_register_tools(self, config: object) -> list[object]:
        return []


class TypoPlugin:
    @hookimpl
    def agentrt_model_provder(self, name: str) -> None:
        return None


class BadPlugin:
    @hookimpl
    def agentrt_model_provider(self, name: str) -> object:
        return object()


class FakeEntryPoint:
    group = ENTRYPOINT_GROUP

    def __init__(self, name: str, load: Callable[[], object]) -> None:
        self.name = name
        self._load = load

    def load(self) -> object:
        return self._load()


class FakeDistribution:
    def __init__(self, *entry_points: FakeEntryPoint) -> None:
        self.entry_points = entry_points
        self.metadata = {"name": "fake-dist"}


def fake_distributions(monkeypatch: pytest.MonkeyPatch, *entry_points: FakeEntryPoint) -> None:
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: [FakeDistribution(*entry_points)])


@pytest.fixture
def echo() -> Iterator[EchoPlugin]:
    yield EchoPlugin()


@pytest.fixture
def pm(echo: EchoPlugin) -> Iterator[pluggy.PluginManager]:
    manager = get_model_plugin_manager(entrypoints=False)
    manager.register(echo, name="echo")
    try:
        yield manager
    finally:
        manager.unregister(name="echo")


def test_builtins_are_registered_as_plugins() -> None:
    pm = get_model_plugin_manager(entrypoints=False)

    assert [pm.has_plugin(name) for name in DEFAULT_MODEL_PLUGINS] == [True, True, True]
    assert get_model_plugin_manager(entrypoints=False) is not pm  # a factory, not a global


async def test_registry_creates_builtin_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTRT_TEST_KEY", "sk-registry-test-key")
    async with ModelRegistry(get_model_plugin_manager(entrypoints=False)) as registry:
        scripted = registry.provider(spec())
        openai = registry.provider(spec("openai", "gpt-test", {"api_key_env": "AGENTRT_TEST_KEY"}))
        anthropic = registry.provider(spec("anthropic", "claude-test", {"api_key_env": "AGENTRT_TEST_KEY"}))

        assert isinstance(scripted, ScriptedProvider)
        assert isinstance(openai, OpenAIProvider)
        assert isinstance(anthropic, AnthropicProvider)


async def test_one_provider_per_provider_name_and_options(pm: pluggy.PluginManager, echo: EchoPlugin) -> None:
    async with ModelRegistry(pm) as registry:
        first = registry.provider(spec("echo", options={"a": 1, "b": [1, 2]}))

        assert registry.provider(spec("echo", options={"b": [1, 2], "a": 1})) is first
        assert registry.provider(spec("echo", options={"a": 2, "b": [1, 2]})) is not first
        assert registry.provider(spec("echo", name="other", options={"a": 1, "b": [1, 2]})) is not first
        assert len(echo.created) == 3


async def test_plugin_gets_a_read_only_copy_of_the_options(
    pm: pluggy.PluginManager, echo: EchoPlugin
) -> None:
    options: dict[str, Any] = {"nested": {"x": 1}}
    async with ModelRegistry(pm) as registry:
        registry.provider(spec("echo", options=options))
        options["nested"]["x"] = 2  # the caller's later change reaches neither the plugin nor the cache

        received = echo.created[0].options
        assert received == {"nested": {"x": 1}}
        with pytest.raises(TypeError):
            received["nested"] = {}  # type: ignore[index]


async def test_read_only_mapping_options_are_accepted(pm: pluggy.PluginManager, echo: EchoPlugin) -> None:
    options = MappingProxyType({"nested": MappingProxyType({"x": 1})})
    async with ModelRegistry(pm) as registry:
        first = registry.provider(spec("echo", options=options))

        assert registry.provider(spec("echo", options={"nested": {"x": 1}})) is first
        assert echo.created[0].options == {"nested": {"x": 1}}


class CountingOptions(Mapping[str, Any]):
    """Options that count how often they are read, to see the registry's by-identity shortcut."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.reads = 0

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        self.reads += 1
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


async def test_the_same_options_object_is_not_serialised_again(pm: pluggy.PluginManager) -> None:
    options = CountingOptions({"a": 1})
    async with ModelRegistry(pm) as registry:
        first = registry.provider(spec("echo", options=options))
        reads = options.reads

        for _ in range(3):
            assert registry.provider(spec("echo", options=options)) is first
        assert options.reads == reads > 0
        assert registry.provider(spec("echo", options=CountingOptions({"a": 1}))) is first


async def test_many_equal_options_objects_share_one_provider(
    pm: pluggy.PluginManager, echo: EchoPlugin
) -> None:
    async with ModelRegistry(pm) as registry:
        providers = {id(registry.provider(spec("echo", options={"a": 1}))) for _ in range(1100)}

    assert len(providers) == 1 and len(echo.created) == 1


async def test_unknown_provider_names_the_known_ones(pm: pluggy.PluginManager) -> None:
    async with ModelRegistry(pm) as registry:
        with pytest.raises(
            ModelConfigError,
            match="unknown model provider 'nope'; known providers: anthropic, echo, openai, scripted",
        ) as caught:
            registry.provider(spec("nope"))

    assert caught.value.reason == "unknown_provider"


async def test_options_that_are_not_json_are_a_config_error() -> None:
    async with ModelRegistry(get_model_plugin_manager(entrypoints=False)) as registry:
        with pytest.raises(ModelConfigError, match="must be JSON values"):
            registry.provider(spec(options={"steps": [], "when": object()}))
        with pytest.raises(ModelConfigError, match="must be JSON values"):
            registry.provider(spec(options={"steps": [], "delay_s": float("nan")}))


async def test_bad_options_surface_from_the_provider() -> None:
    async with ModelRegistry(get_model_plugin_manager(entrypoints=False)) as registry:
        with pytest.raises(ModelConfigError, match="invalid options for the scripted model provider"):
            registry.provider(spec(options={"stepz": []}))


async def test_missing_api_key_env_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTRT_TEST_MISSING_KEY", raising=False)
    async with ModelRegistry(get_model_plugin_manager(entrypoints=False)) as registry:
        with pytest.raises(ModelConfigError, match="AGENTRT_TEST_MISSING_KEY is not set"):
            registry.provider(spec("openai", "gpt-test", {"api_key_env": "AGENTRT_TEST_MISSING_KEY"}))


async def test_a_plugin_returning_something_else_is_a_type_error() -> None:
    pm = get_model_plugin_manager(entrypoints=False, blocked=DEFAULT_MODEL_PLUGINS)
    pm.register(BadPlugin(), name="bad")
    async with ModelRegistry(pm) as registry:
        with pytest.raises(TypeError, match="returned object, not a ModelProvider"):
            registry.provider(spec("anything"))


async def test_blocked_builtin_is_unknown() -> None:
    pm = get_model_plugin_manager(entrypoints=False, blocked=["agentrt.server.models._openai"])
    async with ModelRegistry(pm) as registry:
        with pytest.raises(ModelConfigError, match=r"'openai'; known providers: anthropic, scripted$"):
            registry.provider(spec("openai"))


async def test_aclose_closes_every_provider_and_raises_the_first_failure(
    pm: pluggy.PluginManager, echo: EchoPlugin
) -> None:
    registry = ModelRegistry(pm)
    for n in range(3):
        registry.provider(spec("echo", options={"n": n, "fail_close": n > 0}))

    with pytest.raises(OSError, match="close failed 1"):
        await registry.aclose()

    assert [p.closed for p in echo.created] == [1, 1, 1]
    with pytest.raises(RuntimeError, match="closed"):
        registry.provider(spec("echo"))
    await registry.aclose()  # idempotent: nothing left to close
    assert [p.closed for p in echo.created] == [1, 1, 1]


async def test_entry_point_plugins_are_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = EchoPlugin()
    fake_distributions(
        monkeypatch, FakeEntryPoint("echo_models", lambda: plugin), FakeEntryPoint("tools", ToolPlugin)
    )

    pm = get_model_plugin_manager()

    assert pm.has_plugin("echo_models") and pm.has_plugin("tools")
    async with ModelRegistry(pm) as registry:
        assert isinstance(registry.provider(spec("echo")), EchoProvider)
        assert registry.known_providers() == ["anthropic", "echo", "openai", "scripted"]


def test_entrypoints_false_loads_none(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_distributions(monkeypatch, FakeEntryPoint("echo_models", EchoPlugin))

    assert not get_model_plugin_manager(entrypoints=False).has_plugin("echo_models")


def test_misspelled_model_hook_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_distributions(monkeypatch, FakeEntryPoint("typo", TypoPlugin))

    with pytest.raises(pluggy.PluginValidationError, match="unknown hook 'agentrt_model_provder'"):
        get_model_plugin_manager()


def test_each_hook_family_has_its_own_project_and_group(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ENTRYPOINT_GROUP == "agentrt.models"
    fake_distributions(monkeypatch, FakeEntryPoint("tool_as_model", ToolHookAsModelHook))

    with pytest.raises(pluggy.PluginValidationError, match="unknown hook 'agentrt_register_tools'"):
        get_model_plugin_manager()


def test_plugin_that_fails_to_import_fails_fast_unless_blocked(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> object:
        raise ModuleNotFoundError("No module named 'broken_plugin'")

    fake_distributions(monkeypatch, FakeEntryPoint("broken", broken))

    with pytest.raises(ModuleNotFoundError):
        get_model_plugin_manager()
    assert not get_model_plugin_manager(blocked=["broken"]).has_plugin("broken")


def test_the_api_key_can_come_from_a_secrets_file(tmp_path: Path) -> None:
    from agentrt.server.models import ModelConfigError, OpenAIProvider

    key_file = tmp_path / "openai.key"
    key_file.write_text("sk-from-file\n")
    provider = OpenAIProvider(options={"api_key_file": str(key_file)}, environ={})
    assert "sk-from-file" not in repr(provider)
    with pytest.raises(ModelConfigError) as info:
        OpenAIProvider(options={"api_key_file": str(tmp_path / "missing.key")}, environ={})
    assert info.value.reason == "missing_api_key" and "missing.key" in str(info.value)
    (tmp_path / "empty.key").write_text("\n")
    with pytest.raises(ModelConfigError, match="empty"):
        OpenAIProvider(options={"api_key_file": str(tmp_path / "empty.key")}, environ={})


# -- bounded cache (issue 9: distinct inline options must not keep providers open forever) ---------


async def test_past_the_bound_the_least_recently_used_provider_is_evicted_and_closed(
    pm: pluggy.PluginManager, echo: EchoPlugin
) -> None:
    async with ModelRegistry(pm, max_providers=2) as registry:
        a = registry.provider(spec("echo", options={"n": 0}))
        registry.provider(spec("echo", options={"n": 1}))
        assert registry.provider(spec("echo", options={"n": 0})) is a  # 0 is now the most recent
        registry.provider(spec("echo", options={"n": 2}))  # evicts 1
        await registry.drain()

        assert [p.closed for p in echo.created] == [0, 1, 0]
        assert registry.stats().cached == 2
        again = registry.provider(spec("echo", options={"n": 1}))  # a new provider, evicting 0
        await registry.drain()

        assert again is not echo.created[1] and len(echo.created) == 4
        assert [p.closed for p in echo.created] == [1, 1, 0, 0]


async def test_many_distinct_options_never_keep_more_than_the_bound_open(
    pm: pluggy.PluginManager, echo: EchoPlugin
) -> None:
    async with ModelRegistry(pm, max_providers=5) as registry:
        for n in range(200):
            with registry.lease(spec("echo", options={"n": n})) as provider:
                await provider.complete(request())
            await registry.drain()
            open_now = sum(1 for p in echo.created if not p.closed)
            assert open_now <= 5
        stats = registry.stats()

    assert (stats.cached, stats.in_use, stats.retiring, stats.created, stats.closed) == (5, 0, 0, 200, 195)
    assert all(p.closed == 1 for p in echo.created)  # the rest closed with the registry


async def test_a_provider_in_use_is_closed_only_after_its_last_lease_is_released(
    pm: pluggy.PluginManager, echo: EchoPlugin
) -> None:
    async with ModelRegistry(pm, max_providers=1) as registry:
        first = registry.lease(spec("echo", options={"n": 0}))
        second = registry.lease(spec("echo", options={"n": 0}))
        assert first.provider is second.provider
        registry.provider(spec("echo", options={"n": 1}))  # evicts n=0 while two calls hold it
        await registry.drain()

        assert echo.created[0].closed == 0
        assert registry.stats().retiring == 1 and registry.stats().in_use == 1
        first.release()
        first.release()  # idempotent: one lease releases once
        await registry.drain()
        assert echo.created[0].closed == 0
        second.release()
        await registry.drain()

        assert echo.created[0].closed == 1
        assert registry.stats().retiring == 0
        # Asked for again, the evicted spec gets a fresh provider; the closed one is never handed out.
        with registry.lease(spec("echo", options={"n": 0})) as fresh:
            assert fresh is not echo.created[0]


async def test_an_evicted_provider_is_not_returned_through_the_identity_shortcut(
    pm: pluggy.PluginManager, echo: EchoPlugin
) -> None:
    options = {"n": 0}
    async with ModelRegistry(pm, max_providers=1) as registry:
        first = registry.provider(spec("echo", options=options))
        registry.provider(spec("echo", options={"n": 1}))
        await registry.drain()

        again = registry.provider(spec("echo", options=options))  # the same object as before

        assert first.closed == 1  # type: ignore[attr-defined]
        assert again is not first


async def test_aclose_closes_providers_still_leased(pm: pluggy.PluginManager, echo: EchoPlugin) -> None:
    registry = ModelRegistry(pm, max_providers=1)
    held = registry.lease(spec("echo", options={"n": 0}))
    registry.provider(spec("echo", options={"n": 1}))

    await registry.aclose()

    assert [p.closed for p in echo.created] == [1, 1]
    held.release()  # after close: nothing more happens
    await asyncio.sleep(0)
    assert [p.closed for p in echo.created] == [1, 1]


async def test_a_failed_close_of_an_evicted_provider_is_logged_not_raised(
    pm: pluggy.PluginManager, echo: EchoPlugin, caplog: pytest.LogCaptureFixture
) -> None:
    async with ModelRegistry(pm, max_providers=1) as registry:
        registry.provider(spec("echo", options={"n": 0, "fail_close": True}))
        registry.provider(spec("echo", options={"n": 1}))
        await registry.drain()

        assert "closing evicted model provider" in caplog.text
        assert registry.stats().closed == 1


def test_max_providers_must_be_positive(pm: pluggy.PluginManager) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ModelRegistry(pm, max_providers=0)


def request() -> ModelRequest:
    return ModelRequest(run_id="r", step=1, spec=spec("echo"), messages=(), tools=(), timeout_s=None)
