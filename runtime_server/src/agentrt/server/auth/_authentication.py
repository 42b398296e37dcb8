"""Authentication: turning a call's credential into a :class:`Principal` (DESIGN R10.2).

Authenticators are tried in order; the first that recognises a credential decides (the order
and the routing of bearer tokens are in :mod:`agentrt.server.auth._build`). With none configured
on a loopback server every caller is the local principal (the demo, the tests).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from agentrt.server.auth._principal import Principal
from agentrt.server.core import NotAuthenticated
from agentrt.toolhost.security import PeerCertificate

__all__ = ["AuthRequest", "Authentication", "Authenticator"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthRequest:
    """What an authenticator sees of a call.

    Attributes:
        method: Full method name, ``/package.Service/Method``.
        metadata: Call metadata, keys lower-cased; binary (``-bin``) entries are left out.
        peer: The verified client certificate, when the call came over mTLS.
    """

    method: str
    metadata: Mapping[str, str]
    peer: PeerCertificate | None


class Authenticator(Protocol):
    """One way of recognising a caller.

    ``authenticate`` returns None when the call carries no credential of its kind, a principal
    when it carries a good one, and raises :class:`NotAuthenticated` when it carries a bad one
    (the message names the problem, never the credential).
    """

    name: str

    def authenticate(self, request: AuthRequest) -> Principal | None: ...


class Authentication:
    """Runs authenticators in order; the first that recognises a credential decides.

    Args:
        authenticators: The configured authenticators.
        local: The principal of every caller when no authenticator is configured (loopback
            servers with no auth: the demo and tests). None requires a credential.
    """

    def __init__(self, authenticators: Sequence[Authenticator], *, local: Principal | None = None) -> None:
        self.authenticators = list(authenticators)
        self.local = local

    def authenticate(self, request: AuthRequest) -> Principal:
        """The caller's principal.

        Raises:
            NotAuthenticated: No authenticator recognised a credential, or one was bad.
        """
        if self.local is not None:
            return self.local
        for authenticator in self.authenticators:
            principal = authenticator.authenticate(request)
            if principal is not None:
                return principal
        raise NotAuthenticated(
            "authentication required: send 'authorization: Bearer <token>' or a client certificate",
            reason="UNAUTHENTICATED",
        )
