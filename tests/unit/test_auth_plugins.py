"""Authentication plugins: the hookspec, the plugin manager factory (real entry points), the hook's use."""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Mapping
from pathlib import Path

import pluggy
import pytest

from agentrt.server.auth import (
    AuthRequest,
    PluginAuthenticator,
    Principal,
    build_authentication,
    get_auth_plugin_manager,
    hookimpl,
    hookspecs,
)
from agentrt.server.config import AuthConfig
from agentrt.server.core import NotAuthenticated
from agentrt.toolhost import hookimpl as tool_hookimpl
from agentrt.toolhost.security import PeerCertificate

KEY = "api-key-0f9e8d7c6b5a"


class ApiKeys:
    """A plugin: principals for an ``x-api-key`` header; records what it was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str], tuple[str, ...]]] = []

    @hookimpl
    def agentrt_authenticate(
        self, method: str, metadata: Mapping[str, str], peer_names: tuple[str, ...]
    ) -> Principal | None:
        self.calls.append((method, dict(metadata), peer_names))
        presented = metadata.get("x-api-key") or metadata.get("authorization", "").removeprefix("Bearer ")
        if not presented:
            return None
        if presented != KEY:
            raise NotAuthenticated("unknown API key", reason="API_KEY_UNKNOWN")
        return Principal(subject="svc", tenant="acme", roles=frozenset({"runner"}), authenticated_by="")


def manager(*plugins: object) -> pluggy.PluginManager:
    pm = get_auth_plugin_manager(entrypoints=False)
    for plugin in plugins:
        pm.register(plugin)
    return pm


def request(metadata: dict[str, str] | None = None, names: tuple[str, ...] | None = None) -> AuthRequest:
    peer = PeerCertificate(names=names) if names is not None else None
    return AuthRequest(
        method="/agentrt.runtime.v1.AgentRuntimeService/GetRun", metadata=metadata or {}, peer=peer
    )


def test_every_hook_is_documented_with_its_arguments() -> None:
    specs = [v for k, v in vars(hookspecs).items() if k.startswith("agentrt_") and callable(v)]
    assert [s.__name__ for s in specs] == ["agentrt_authenticate"]
    for spec in specs:
        doc = inspect.getdoc(spec) or ""
        assert "Stops at first non-None result" in doc
        for argument in inspect.signature(spec).parameters:
            assert f":param {argument}:" in doc, argument
        assert ":return:" in doc


def test_a_plugin_recognises_its_credential_and_sees_the_call() -> None:
    plugin = ApiKeys()
    authenticator = PluginAuthenticator(pm=manager(plugin))
    principal = authenticator.authenticate(request({"x-api-key": KEY}, names=("CN=svc",)))
    assert principal is not None and principal.subject == "svc"
    assert principal.authenticated_by == "plugin"  # filled in when the plugin left it empty
    method, metadata, names = plugin.calls[-1]
    assert method.endswith("/GetRun") and metadata == {"x-api-key": KEY} and names == ("CN=svc",)
    assert authenticator.authenticate(request()) is None
    with pytest.raises(NotAuthenticated) as refused:
        authenticator.authenticate(request({"x-api-key": "wrong"}))
    assert refused.value.reason == "API_KEY_UNKNOWN"


def test_the_metadata_a_plugin_gets_is_read_only() -> None:
    class Meddler:
        @hookimpl
        def agentrt_authenticate(self, metadata: Mapping[str, str]) -> Principal | None:
            metadata["x-api-key"] = KEY  # type: ignore[index]
            return None

    with pytest.raises(TypeError):
        PluginAuthenticator(pm=manager(Meddler())).authenticate(request())


@pytest.mark.parametrize(
    "returned",
    [
        "alice",
        Principal(subject="", tenant="acme", roles=frozenset({"runner"}), authenticated_by="x"),
        Principal(subject="a", tenant="", roles=frozenset({"runner"}), authenticated_by="x"),
        Principal(subject="a", tenant="acme", roles=frozenset({"root"}), authenticated_by="x"),  # type: ignore[arg-type]
        Principal(subject="a", tenant="acme", roles={"runner"}, authenticated_by="x"),  # type: ignore[arg-type]
    ],
)
def test_a_plugin_returning_something_invalid_is_an_error(returned: object) -> None:
    class Broken:
        @hookimpl
        def agentrt_authenticate(self) -> object:
            return returned

    with pytest.raises(TypeError, match="agentrt_authenticate returned"):
        PluginAuthenticator(pm=manager(Broken())).authenticate(request())


def test_misspelled_auth_hooks_are_rejected_but_other_families_hooks_are_not() -> None:
    class Misspelled:
        @hookimpl
        def agentrt_authenticat(self, method: str) -> None:
            return None

    class OtherHooks:  # a tool hook, marked with the tool SDK's marker
        @tool_hookimpl
        def agentrt_register_tools(self) -> list[object]:
            return []

    class ToolHookAsAuthHook:
        @hookimpl
        def agentrt_register_tools(self) -> list[object]:
            return []

    with pytest.raises(pluggy.PluginValidationError, match="agentrt_authenticat"):
        PluginAuthenticator(pm=manager(Misspelled()))
    PluginAuthenticator(pm=manager(OtherHooks()))
    with pytest.raises(pluggy.PluginValidationError, match="agentrt_register_tools"):
        PluginAuthenticator(pm=manager(ToolHookAsAuthHook()))

    class WrongArguments:
        @hookimpl
        def agentrt_authenticate(self, token: str) -> None:
            return None

    with pytest.raises(pluggy.PluginValidationError):
        manager(WrongArguments())


def write_distribution(root: Path, module: str, source: str) -> None:
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[agentrt.auth]\n{module} = {module}\n")


def test_plugins_load_from_the_entry_point_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_distribution(
        tmp_path,
        "agentrt_auth_demo_plugin",
        """
        from agentrt.server.auth import Principal, hookimpl

        @hookimpl
        def agentrt_authenticate(metadata):
            if metadata.get("x-demo") == "yes":
                return Principal(subject="demo", tenant="t", roles=frozenset({"operator"}),
                                 authenticated_by="demo")
            return None
        """,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    pm = get_auth_plugin_manager()
    assert pm.get_plugin("agentrt_auth_demo_plugin") is not None
    authentication = build_authentication(AuthConfig(plugins=True), local=None, plugin_manager=pm)
    assert authentication.authenticate(request({"x-demo": "yes"})).subject == "demo"
    with pytest.raises(NotAuthenticated) as refused:
        authentication.authenticate(request())
    assert refused.value.reason == "UNAUTHENTICATED"

    blocked = get_auth_plugin_manager(blocked=["agentrt_auth_demo_plugin"])
    assert blocked.get_plugin("agentrt_auth_demo_plugin") is None


def test_an_entry_point_with_a_misspelled_hook_stops_the_factory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_distribution(
        tmp_path,
        "agentrt_auth_typo_plugin",
        """
        from agentrt.server.auth import hookimpl

        @hookimpl
        def agentrt_authenticates(metadata):
            return None
        """,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(pluggy.PluginValidationError, match="agentrt_authenticates"):
        get_auth_plugin_manager()
