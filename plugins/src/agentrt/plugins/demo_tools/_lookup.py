"""``orders.lookup``: a read-only tool over the demo shop's orders, their status and refunds."""

from __future__ import annotations

from typing import Any

import pydantic

from agentrt.toolhost import SideEffect, ToolContext, tool, with_variables

from ._orders import find_order, order_status
from ._refunds import refunded_amount

__all__ = ["LookupArgs", "lookup_order"]


class LookupArgs(pydantic.BaseModel):
    """Arguments of orders.lookup."""

    model_config = pydantic.ConfigDict(extra="forbid")

    order_id: str = pydantic.Field(min_length=1, max_length=64, description="Order id, e.g. A100.")


@tool(
    name="orders.lookup",
    description="Look up an order by id: customer, amount, currency, status and what was refunded.",
    side_effect=SideEffect.READ_ONLY,
    idempotent=True,
    concurrency_safe=True,
    timeout=5.0,
)
def lookup_order(args: LookupArgs, ctx: ToolContext) -> dict[str, Any]:
    """Return the order as it is now; an unknown id is a PERMANENT error.

    Sets the run variables ``order_id`` and ``order_status``: the order the run is about, as a
    business fact approvals and re-checks can read.
    """
    order = find_order(args.order_id)
    status = order_status(ctx.data_dir, order.order_id)
    found = {
        **order.as_dict(),
        "status": status,
        "refunded": refunded_amount(ctx.data_dir, order.order_id),
    }
    return with_variables(found, {"order_id": order.order_id, "order_status": status})
