"""Build the server's :class:`Authentication` from its configuration, and route bearer tokens.

Precedence (one credential decides; a presented credential that is bad or unknown is refused
and never falls through to another credential):

1. An ``authorization`` header, when present, decides. It must be ``Bearer <token>`` (scheme
   case-insensitive, one header, a token of printable ASCII without spaces, at most 8 KiB in
   all), else ``MALFORMED_AUTHORIZATION``. The token goes to exactly one authenticator:

   - a JWT-shaped token (``eyJ<header>.<payload>.<signature>``) to the JWT verifier when
     ``[auth.jwt]`` is configured;
   - otherwise to the static tokens when ``tokens_file`` is configured;
   - otherwise to the plugins when ``plugins = true`` (no plugin recognising it: ``TOKEN_UNKNOWN``);
   - otherwise to the JWT verifier when configured (which refuses it as ``TOKEN_MALFORMED``);
   - otherwise it is refused with ``BEARER_NOT_ACCEPTED``.
2. Without an ``authorization`` header, a verified client certificate decides when ``[auth.mtls]``
   is configured: its mapped principal, or ``UNKNOWN_CLIENT_CERTIFICATE``.
3. Then the plugins' ``agentrt_authenticate`` hook (they see the metadata and certificate names).
4. Nothing recognised: ``UNAUTHENTICATED``.

With no authenticator configured, every caller is ``local`` (loopback servers: demo, tests).
"""

from __future__ import annotations

import re

import pluggy

from agentrt.server.auth._authentication import Authentication, Authenticator, AuthRequest
from agentrt.server.auth._jwt import JwtVerifier
from agentrt.server.auth._mtls import MtlsAuthenticator
from agentrt.server.auth._plugins import PluginAuthenticator, get_auth_plugin_manager
from agentrt.server.auth._principal import Principal
from agentrt.server.auth._tokens import StaticTokens
from agentrt.server.config import AuthConfig
from agentrt.server.core import NotAuthenticated

__all__ = ["MAX_AUTHORIZATION_BYTES", "BearerAuthenticator", "bearer_token", "build_authentication"]

MAX_AUTHORIZATION_BYTES = 8192
_TOKEN = re.compile(r"[\x21-\x7e]+")  # RFC 6750 b64token is narrower; any visible ASCII is allowed
_JWT_SHAPE = re.compile(r"eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")


def _malformed(message: str) -> NotAuthenticated:
    return NotAuthenticated(message, reason="MALFORMED_AUTHORIZATION")


def bearer_token(value: str) -> str:
    """The token of an ``authorization`` header value.

    Raises:
        NotAuthenticated: ``MALFORMED_AUTHORIZATION``: not ``Bearer <token>``, empty, too long.
            The message never holds the value.
    """
    if len(value) > MAX_AUTHORIZATION_BYTES:
        raise _malformed(f"the authorization header is longer than {MAX_AUTHORIZATION_BYTES} bytes")
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer":
        raise _malformed("the authorization header must be 'Bearer <token>'")
    token = token.strip()
    if not token:
        raise _malformed("the authorization header has an empty bearer token")
    if not _TOKEN.fullmatch(token):
        raise _malformed("the bearer token must be printable ASCII without spaces")
    return token


class BearerAuthenticator:
    """Decides every call with an ``authorization`` header (see the module docstring for the route).

    Args:
        jwt: The JWT verifier, when configured.
        tokens: The static tokens, when configured.
        plugins: The plugin authenticator, when plugins are enabled.
    """

    name = "bearer"

    def __init__(
        self,
        *,
        jwt: JwtVerifier | None = None,
        tokens: StaticTokens | None = None,
        plugins: PluginAuthenticator | None = None,
    ) -> None:
        self.jwt = jwt
        self.tokens = tokens
        self.plugins = plugins

    def authenticate(self, request: AuthRequest) -> Principal | None:
        """The bearer token's principal; None for a call without an ``authorization`` header.

        Raises:
            NotAuthenticated: The header is malformed, or its token is refused.
        """
        value = request.metadata.get("authorization")
        if value is None:
            return None
        token = bearer_token(value)
        if self.jwt is not None and _JWT_SHAPE.fullmatch(token):
            return self.jwt.authenticate_token(token)
        if self.tokens is not None:
            return self.tokens.authenticate_token(token)
        if self.plugins is not None:
            principal = self.plugins.authenticate(request)
            if principal is None:
                raise NotAuthenticated("no plugin recognised the bearer token", reason="TOKEN_UNKNOWN")
            return principal
        if self.jwt is not None:
            return self.jwt.authenticate_token(token)
        raise NotAuthenticated("this server does not accept bearer tokens", reason="BEARER_NOT_ACCEPTED")


def build_authentication(
    auth: AuthConfig, *, local: Principal | None, plugin_manager: pluggy.PluginManager | None = None
) -> Authentication:
    """The configured authenticators, in order; ``local`` answers for everyone when none is configured.

    Args:
        auth: The ``[auth]`` configuration.
        local: The principal of every caller when no authenticator is configured.
        plugin_manager: The auth plugin manager when ``auth.plugins`` is on; built with
            :func:`get_auth_plugin_manager` (entry points loaded) when not given.

    Raises:
        ValueError: A configured file cannot be read or parsed (the message names it, never a secret).
        pluggy.PluginValidationError: A plugin misspells an ``agentrt_auth*`` hook.
    """
    if not auth.configured:
        return Authentication([], local=local)
    tokens = StaticTokens(path=auth.tokens_file) if auth.tokens_file else None
    jwt = JwtVerifier(config=auth.jwt) if auth.jwt is not None else None
    plugins = (
        PluginAuthenticator(pm=plugin_manager if plugin_manager is not None else get_auth_plugin_manager())
        if auth.plugins
        else None
    )
    chain: list[Authenticator] = [BearerAuthenticator(jwt=jwt, tokens=tokens, plugins=plugins)]
    if auth.mtls:
        chain.append(MtlsAuthenticator(mapping=auth.mtls))
    if plugins is not None:
        chain.append(plugins)
    return Authentication(chain, local=None)
