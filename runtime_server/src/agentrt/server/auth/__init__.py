"""Authentication and authorisation of runtime API callers (DESIGN R10.2).

Built-in authenticators: static bearer tokens stored as SHA-256 hashes (:func:`hash_token`),
JWT bearer tokens (PyJWT, JWKS file or inline public keys), mTLS client certificates mapped by
configuration, and ``agentrt_authenticate`` plugin hooks (:mod:`agentrt.server.auth.hookspecs`).
:func:`build_authentication` builds the chain; its module documents the precedence: an
``authorization`` header decides when present, then a client certificate, then plugins, and a
presented credential that is refused never falls through to another one.
"""

from __future__ import annotations

from agentrt.server.auth._authentication import Authentication, Authenticator, AuthRequest
from agentrt.server.auth._build import (
    MAX_AUTHORIZATION_BYTES,
    BearerAuthenticator,
    bearer_token,
    build_authentication,
)
from agentrt.server.auth._jwt import JwtVerifier
from agentrt.server.auth._mtls import MtlsAuthenticator
from agentrt.server.auth._plugins import ENTRYPOINT_GROUP, PluginAuthenticator, get_auth_plugin_manager
from agentrt.server.auth._principal import (
    LOCAL_SUBJECT,
    Principal,
    current_principal,
    local_principal,
    principal_var,
)
from agentrt.server.auth._roles import (
    HEALTH_PREFIX,
    METHOD_PERMISSIONS,
    ROLE_PERMISSIONS,
    Permission,
    allowed,
    permission_for,
)
from agentrt.server.auth._tokens import StaticTokens, hash_token, parse_tokens
from agentrt.server.auth.hookspecs import hookimpl, hookspec

__all__ = [
    "ENTRYPOINT_GROUP",
    "HEALTH_PREFIX",
    "LOCAL_SUBJECT",
    "MAX_AUTHORIZATION_BYTES",
    "METHOD_PERMISSIONS",
    "ROLE_PERMISSIONS",
    "AuthRequest",
    "Authentication",
    "Authenticator",
    "BearerAuthenticator",
    "JwtVerifier",
    "MtlsAuthenticator",
    "Permission",
    "PluginAuthenticator",
    "Principal",
    "StaticTokens",
    "allowed",
    "bearer_token",
    "build_authentication",
    "current_principal",
    "get_auth_plugin_manager",
    "hash_token",
    "hookimpl",
    "hookspec",
    "local_principal",
    "parse_tokens",
    "permission_for",
    "principal_var",
]
