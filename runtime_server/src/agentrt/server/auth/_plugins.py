"""Authentication plugins: the plugin manager factory and the authenticator that asks the hook."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from types import MappingProxyType

import pluggy

from agentrt.server.auth import hookspecs
from agentrt.server.auth._authentication import AuthRequest
from agentrt.server.auth._principal import Principal
from agentrt.server.config import ROLES

__all__ = ["ENTRYPOINT_GROUP", "PluginAuthenticator", "get_auth_plugin_manager"]

#: Entry-point group of authentication plugins (each hook family has its own).
ENTRYPOINT_GROUP = hookspecs.PROJECT_NAME


def get_auth_plugin_manager(*, entrypoints: bool = True, blocked: Iterable[str] = ()) -> pluggy.PluginManager:
    """Build a plugin manager with the authentication hookspecs.

    Args:
        entrypoints: Also load the plugins of the ``agentrt.auth`` entry-point group. A plugin
            that fails to import makes this raise (fail fast); block it with ``blocked``.
        blocked: Plugin (entry-point) names not to register.

    Returns:
        A new plugin manager; each call returns a fresh one.

    Raises:
        pluggy.PluginValidationError: A plugin implements an ``agentrt_auth*`` hook that does not
            exist (a misspelled name) or with arguments the hookspec does not have.
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    for name in blocked:
        pm.set_blocked(name)
    if entrypoints:
        pm.load_setuptools_entrypoints(ENTRYPOINT_GROUP)
    check_auth_hooks(pm)
    return pm


def check_auth_hooks(pm: pluggy.PluginManager) -> None:
    """Reject hook implementations that have no spec (misspelled names).

    The family has its own project name, so every unknown hook here is a misspelled auth hook.

    Raises:
        pluggy.PluginValidationError: Naming the hook and the plugin.
    """
    pm.check_pending()


class PluginAuthenticator:
    """Asks the ``agentrt_authenticate`` hook of the installed plugins.

    Args:
        pm: A manager from :func:`get_auth_plugin_manager` (plugins registered).

    Raises:
        pluggy.PluginValidationError: A misspelled ``agentrt_auth*`` hook (checked again here,
            for plugins registered after the manager was built).
    """

    name = "plugin"

    def __init__(self, *, pm: pluggy.PluginManager) -> None:
        check_auth_hooks(pm)
        self._hook = pm.hook.agentrt_authenticate

    def authenticate(self, request: AuthRequest) -> Principal | None:
        """The principal a plugin recognised, or None.

        Raises:
            NotAuthenticated: A plugin refused the credential.
            TypeError: A plugin returned something that is not a valid principal (the
                interceptor refuses the call with ``AUTH_FAILED``).
        """
        found = self._hook(
            method=request.method,
            metadata=MappingProxyType(dict(request.metadata)),
            peer_names=request.peer.names if request.peer is not None else (),
        )
        if found is None:
            return None
        if not isinstance(found, Principal):
            raise TypeError(f"agentrt_authenticate returned {type(found).__name__}, not a Principal")
        if not (
            isinstance(found.subject, str)
            and found.subject
            and isinstance(found.tenant, str)
            and found.tenant
        ):
            raise TypeError("agentrt_authenticate returned a principal without a subject or tenant")
        if not isinstance(found.roles, frozenset) or not found.roles <= set(ROLES):
            raise TypeError("agentrt_authenticate returned a principal with unknown roles")
        if not found.authenticated_by:
            found = dataclasses.replace(found, authenticated_by=self.name)
        return found
