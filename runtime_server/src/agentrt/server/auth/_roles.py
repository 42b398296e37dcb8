"""What each role may do, and what each RPC needs (DESIGN R10.2). Pure tables, no I/O."""

from __future__ import annotations

import enum
from collections.abc import Mapping

from agentrt.server.config import ROLES, Role

__all__ = [
    "HEALTH_PREFIX",
    "METHOD_PERMISSIONS",
    "ROLE_PERMISSIONS",
    "Permission",
    "allowed",
    "permission_for",
]


class Permission(enum.Enum):
    """One thing a caller may do; RPCs map onto these."""

    START_RUNS = "start_runs"  # RunAgent, StartRun
    READ_RUNS = "read_runs"  # GetRun, StreamRunEvents, GetPayload
    LIST_RUNS = "list_runs"  # ListRuns
    CANCEL_RUNS = "cancel_runs"  # CancelRun
    RESOLVE_APPROVALS = "resolve_approvals"  # ResolveApproval
    RESOLVE_OUTCOMES = "resolve_outcomes"  # ResolveOutcome
    DIAGNOSE_RUNS = "diagnose_runs"  # GetRunDiagnostics: leases, faults, schedules (operators only)
    INTROSPECT = "introspect"  # server reflection: any caller holding a role


# Every role may introspect (reflection describes the API, not any tenant's data); a principal
# with no role (a JWT whose roles are all unknown) may do nothing.
ROLE_PERMISSIONS: Mapping[Role, frozenset[Permission]] = {
    "runner": frozenset(
        {
            Permission.START_RUNS,
            Permission.READ_RUNS,
            Permission.LIST_RUNS,
            Permission.CANCEL_RUNS,
            Permission.INTROSPECT,
        }
    ),
    "approver": frozenset(
        {Permission.READ_RUNS, Permission.LIST_RUNS, Permission.RESOLVE_APPROVALS, Permission.INTROSPECT}
    ),
    "operator": frozenset(
        {
            Permission.READ_RUNS,
            Permission.LIST_RUNS,
            Permission.CANCEL_RUNS,
            Permission.RESOLVE_OUTCOMES,
            Permission.DIAGNOSE_RUNS,
            Permission.INTROSPECT,
        }
    ),
    "admin": frozenset(Permission),
}
assert set(ROLE_PERMISSIONS) == set(ROLES)

_RUNTIME = "/agentrt.runtime.v1.AgentRuntimeService/"

METHOD_PERMISSIONS: Mapping[str, Permission] = {
    _RUNTIME + "RunAgent": Permission.START_RUNS,
    _RUNTIME + "StartRun": Permission.START_RUNS,
    _RUNTIME + "GetRun": Permission.READ_RUNS,
    _RUNTIME + "StreamRunEvents": Permission.READ_RUNS,
    _RUNTIME + "GetPayload": Permission.READ_RUNS,
    _RUNTIME + "ListRuns": Permission.LIST_RUNS,
    _RUNTIME + "CancelRun": Permission.CANCEL_RUNS,
    _RUNTIME + "ResolveApproval": Permission.RESOLVE_APPROVALS,
    _RUNTIME + "ResolveOutcome": Permission.RESOLVE_OUTCOMES,
    _RUNTIME + "GetRunDiagnostics": Permission.DIAGNOSE_RUNS,
}

_REFLECTION_PREFIXES = ("/grpc.reflection.v1alpha.ServerReflection/", "/grpc.reflection.v1.ServerReflection/")
HEALTH_PREFIX = "/grpc.health.v1.Health/"


def permission_for(method: str) -> Permission | None:
    """The permission an RPC needs; None for an RPC this table does not know (refuse it)."""
    found = METHOD_PERMISSIONS.get(method)
    if found is not None:
        return found
    if method.startswith(_REFLECTION_PREFIXES):
        return Permission.INTROSPECT
    return None


def allowed(roles: frozenset[Role], permission: Permission) -> bool:
    """True when any of ``roles`` grants ``permission``."""
    return any(permission in ROLE_PERMISSIONS[role] for role in roles)
