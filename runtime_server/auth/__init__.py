"""Authentication and authorisation of runtime API callers (DESIGN R10.2)."""

from __future__ import annotations

from runtime_server.auth._authentication import Authentication, Authenticator, AuthRequest
from runtime_server.auth._build import build_authentication
from runtime_server.auth._principal import (
    LOCAL_SUBJECT,
    Principal,
    current_principal,
    local_principal,
    principal_var,
)
from runtime_server.auth._roles import (
    HEALTH_PREFIX,
    METHOD_PERMISSIONS,
    ROLE_PERMISSIONS,
    Permission,
    allowed,
    permission_for,
)

__all__ = [
    "HEALTH_PREFIX",
    "LOCAL_SUBJECT",
    "METHOD_PERMISSIONS",
    "ROLE_PERMISSIONS",
    "AuthRequest",
    "Authentication",
    "Authenticator",
    "Permission",
    "Principal",
    "allowed",
    "build_authentication",
    "current_principal",
    "local_principal",
    "permission_for",
    "principal_var",
]
