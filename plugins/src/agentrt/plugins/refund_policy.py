"""Approval policy shipped as an example: refunds above a limit need a person.

The limit is the agent's ``approvals.options.refund_limit`` (default 25.0).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentrt.server.policies import ApprovalRequirement, hookimpl

__all__ = ["agentrt_approval_policy"]

DEFAULT_LIMIT = 25.0


@hookimpl(optionalhook=True)
def agentrt_approval_policy(
    tool: str, arguments: Mapping[str, Any], agent_name: str, options: Mapping[str, Any]
) -> ApprovalRequirement | None:
    """Refunds over the limit need approval; other calls are not this policy's business."""
    if tool != "refund.issue":
        return None
    limit = float(options.get("refund_limit", DEFAULT_LIMIT))
    amount = float(arguments.get("amount", 0) or 0)
    if amount > limit:
        return ApprovalRequirement(
            required=True, reason=f"refund {amount:.2f} is over {limit:.2f}", policy_version="refund-limit-1"
        )
    return ApprovalRequirement(required=False, policy_version="refund-limit-1")
