"""Policy hooks: which calls need a person's approval."""

from __future__ import annotations

from runtime_server.policies._manager import ENTRYPOINT_GROUP, Policies, get_policy_plugin_manager
from runtime_server.policies._types import ApprovalRequirement
from runtime_server.policies.hookspecs import hookimpl, hookspec

__all__ = [
    "ENTRYPOINT_GROUP",
    "ApprovalRequirement",
    "Policies",
    "get_policy_plugin_manager",
    "hookimpl",
    "hookspec",
]
