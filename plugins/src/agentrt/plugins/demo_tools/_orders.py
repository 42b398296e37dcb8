"""``orders.lookup``: a read-only tool over a small built-in order table."""

from __future__ import annotations

import dataclasses
from typing import Any

import pydantic

from agentrt.toolhost import PermanentError, SideEffect, ToolContext, tool

__all__ = ["ORDERS", "LookupArgs", "Order", "lookup_order"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Order:
    """One order of the demo shop."""

    order_id: str
    customer: str
    amount: float
    currency: str
    status: str

    def as_dict(self) -> dict[str, Any]:
        """The order as a JSON-able dict."""
        return dataclasses.asdict(self)


ORDERS: dict[str, Order] = {
    order.order_id: order
    for order in (
        Order(order_id="A100", customer="Ada Lovelace", amount=120.00, currency="EUR", status="delivered"),
        Order(order_id="A101", customer="Grace Hopper", amount=75.50, currency="EUR", status="shipped"),
        Order(order_id="A102", customer="Alan Turing", amount=250.00, currency="EUR", status="delivered"),
        Order(
            order_id="A103", customer="Katherine Johnson", amount=42.00, currency="EUR", status="cancelled"
        ),
        Order(
            order_id="A104", customer="Edsger Dijkstra", amount=999.99, currency="EUR", status="processing"
        ),
        Order(order_id="A105", customer="Barbara Liskov", amount=15.25, currency="EUR", status="delivered"),
    )
}
"""The demo shop's orders, A100 to A105."""


class LookupArgs(pydantic.BaseModel):
    """Arguments of orders.lookup."""

    model_config = pydantic.ConfigDict(extra="forbid")

    order_id: str = pydantic.Field(min_length=1, max_length=64, description="Order id, e.g. A100.")


@tool(
    name="orders.lookup",
    description="Look up an order by id: customer, amount, currency and status.",
    side_effect=SideEffect.READ_ONLY,
    idempotent=True,
    concurrency_safe=True,
    timeout=5.0,
)
def lookup_order(args: LookupArgs, ctx: ToolContext) -> dict[str, Any]:
    """Return the order; an unknown id is a PERMANENT error (retrying cannot make it exist)."""
    order = ORDERS.get(args.order_id)
    if order is None:
        raise PermanentError(f"order {args.order_id!r} not found", details={"order_id": args.order_id})
    return order.as_dict()
