"""Who is calling: the authenticated principal of an RPC, and the context variable that carries it."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

from agentrt.server.config import Role
from agentrt.server.core import NotAuthenticated

__all__ = ["LOCAL_SUBJECT", "Principal", "current_principal", "local_principal", "principal_var"]

LOCAL_SUBJECT = "local"
"""Subject of every caller of a loopback server with no authentication configured."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Principal:
    """An authenticated caller.

    Attributes:
        subject: Stable id of the caller (token name, JWT ``sub``, certificate name); recorded
            on the events of what it changes.
        tenant: The tenant every query and mutation of the call is scoped to.
        roles: Roles held; ``admin`` holds every permission.
        authenticated_by: How: ``token``, ``jwt``, ``mtls``, ``local`` or a plugin's name.
    """

    subject: str
    tenant: str
    roles: frozenset[Role]
    authenticated_by: str

    def has_role(self, *roles: Role) -> bool:
        """True when the principal holds one of ``roles`` (or is admin)."""
        return "admin" in self.roles or any(role in self.roles for role in roles)


principal_var: contextvars.ContextVar[Principal | None] = contextvars.ContextVar(
    "agentrt_principal", default=None
)
"""Set by the authentication interceptor for the handler it wraps; read with :func:`current_principal`."""


def current_principal() -> Principal:
    """The principal of the RPC being handled.

    Raises:
        NotAuthenticated: No principal was set (the handler ran without the interceptor).
    """
    principal = principal_var.get()
    if principal is None:
        raise NotAuthenticated("this call carries no authenticated principal")
    return principal


def local_principal(tenant: str) -> Principal:
    """Every caller of a server that trusts its local callers: all roles, the default tenant."""
    return Principal(
        subject=LOCAL_SUBJECT,
        tenant=tenant,
        roles=frozenset(("runner", "approver", "operator", "admin")),
        authenticated_by="local",
    )
