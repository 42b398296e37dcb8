"""Build the server's :class:`Authentication` from its configuration."""

from __future__ import annotations

from runtime_server._config_security import AuthConfig
from runtime_server.auth._authentication import Authentication
from runtime_server.auth._principal import Principal

__all__ = ["build_authentication"]


def build_authentication(auth: AuthConfig, *, local: Principal | None) -> Authentication:
    """The configured authenticators, in order; ``local`` answers for everyone when none is configured.

    Raises:
        ValueError: A configured file cannot be read or parsed (the message names it, never a secret).
    """
    if not auth.configured:
        return Authentication([], local=local)
    raise NotImplementedError("authenticators arrive in the next change")
