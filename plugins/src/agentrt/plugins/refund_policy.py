"""Approval policy shipped as an example: refunds above a limit need a person, and are checked
again right before they run.

The limit is the agent's ``approvals.options.refund_limit`` (default 25.0).

The re-check reads the order as it is now through the read-only tool ``orders.lookup``, called
for the run through the engine (its tenant, its call grants), not from the demo tools' files:
the order's state belongs to the tool host, which may run on another machine, and a real shop
would answer from its own service. An approved refund is vetoed when the order was cancelled
since, or when its refunds so far plus this one would pass the order's amount (refunded since).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agentrt.server.policies import ApprovalRequirement, hookimpl

__all__ = ["agentrt_approval_policy", "agentrt_recheck_approved"]

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


@hookimpl(optionalhook=True)
def agentrt_recheck_approved(
    tool: str,
    arguments: Mapping[str, Any],
    agent_name: str,
    options: Mapping[str, Any],
    run_variables: Mapping[str, str | float | bool],
    read_tool: Callable[[str, Mapping[str, Any]], Any],
) -> str | None:
    """Veto an approved refund whose order was cancelled or refunded since it was approved."""
    if tool != "refund.issue":
        return None
    order_id = str(arguments.get("order_id", ""))
    order = read_tool("orders.lookup", {"order_id": order_id})
    status = str(order.get("status", ""))
    if status == "cancelled":
        seen = run_variables.get("order_status")
        since = f" (it was {seen} when the run looked it up)" if seen and seen != status else ""
        return f"order {order_id} was cancelled{since}; a cancelled order is not refunded"
    amount = float(arguments.get("amount", 0) or 0)
    refunded = float(order.get("refunded", 0) or 0)
    if refunded + amount > float(order.get("amount", 0) or 0) + 1e-9:
        return f"order {order_id} was already refunded {refunded:.2f} of {float(order['amount']):.2f}"
    return None
