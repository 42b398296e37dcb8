"""Hook specifications for authentication plugins.

A plugin is a module (or object) with functions marked by :data:`hookimpl`, registered through
the ``agentrt.auth`` entry-point group and enabled with ``[auth] plugins = true``. Example::

    from agentrt.server.auth import Principal, hookimpl

    @hookimpl
    def agentrt_authenticate(method, metadata):
        key = metadata.get("x-api-key")
        if key is None:
            return None  # not ours: the next plugin, or the call is refused
        owner = lookup(key)  # raise NotAuthenticated for a key you know is bad
        return Principal(subject=owner.name, tenant=owner.tenant, roles=frozenset({"runner"}),
                         authenticated_by="api-key")

Hooks are called with keyword arguments only; an implementation may accept a subset of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from agentrt.server.auth._principal import Principal

__all__ = ["PROJECT_NAME", "agentrt_authenticate", "hookimpl", "hookspec"]

#: The pluggy project and entry-point group of auth plugins (one per hook family).
PROJECT_NAME = "agentrt.auth"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
#: Marks a plugin's implementation of a hook; the same project name as the tool host's marker.
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec(firstresult=True)
def agentrt_authenticate(
    method: str, metadata: Mapping[str, str], peer_names: tuple[str, ...]
) -> Principal | None:
    """Recognise the caller of one RPC, or return ``None`` when the call carries no credential of yours.

    Stops at first non-None result. Called on every RPC the built-in authenticators leave open
    (see :mod:`agentrt.server.auth` for the order): a call without an ``authorization`` header
    and without a client certificate the ``[auth.mtls]`` table decides, or with a bearer token
    when neither static tokens nor JWT (for a JWT-shaped token) are configured. It runs on the
    server's event loop: keep it fast and never block on I/O (cache what you look up).

    To refuse a credential you recognise but reject, raise
    :class:`agentrt.server.core.NotAuthenticated` with a ``reason``; its message reaches the
    caller, so never put the credential in it. Any other exception refuses the call with
    ``UNAUTHENTICATED`` reason ``AUTH_FAILED`` (logged with its type and place only).

    :param method: Full method name, ``/agentrt.runtime.v1.AgentRuntimeService/StartRun``.
    :param metadata: Call metadata, keys lower-cased, without binary (``-bin``) entries; read-only.
    :param peer_names: Names of the verified client certificate (``CN=..``, ``DNS:..``,
        ``URI:..``, ``IP:..``), empty without one.
    :return: A :class:`~agentrt.server.auth.Principal` (non-empty subject and tenant, roles
        from ``runner``, ``approver``, ``operator``, ``admin``), or ``None``.
    """
