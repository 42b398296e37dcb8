"""Policy hooks: which calls need a person's approval, and re-checks of approved calls."""

from __future__ import annotations

from agentrt.server.policies._manager import ENTRYPOINT_GROUP, Policies, get_policy_plugin_manager
from agentrt.server.policies._types import ApprovalRequirement, ReadToolError
from agentrt.server.policies.hookspecs import hookimpl, hookspec

__all__ = [
    "ENTRYPOINT_GROUP",
    "ApprovalRequirement",
    "Policies",
    "ReadToolError",
    "get_policy_plugin_manager",
    "hookimpl",
    "hookspec",
]
