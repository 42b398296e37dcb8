"""The demo shop's orders: a built-in table A100..A105, whose status can change.

An order's status starts as in :data:`ORDERS`; a change (``orders.cancel``, or
:func:`set_order_status` for a test playing the shop) is kept in ``<data_dir>/orders.sqlite``,
so the tool host's tools and a test in another process see the same state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic

from agentrt.toolhost import PermanentError, SideEffect, ToolContext, tool

__all__ = [
    "ORDERS",
    "ORDERS_FILE",
    "CancelArgs",
    "Order",
    "cancel_order",
    "find_order",
    "order_status",
    "set_order_status",
]

ORDERS_FILE = "orders.sqlite"


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


_SCHEMA = """
CREATE TABLE IF NOT EXISTS order_status (
    order_id       TEXT PRIMARY KEY,
    status         TEXT NOT NULL,
    update_time_ns INTEGER NOT NULL
)
"""


@contextlib.contextmanager
def _connect(data_dir: Path) -> Iterator[sqlite3.Connection]:
    data_dir.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(data_dir / ORDERS_FILE, isolation_level=None, timeout=10.0)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(_SCHEMA)
        yield db
    finally:
        db.close()


def find_order(order_id: str) -> Order:
    """The built-in order; PERMANENT when there is none (retrying cannot make it exist)."""
    order = ORDERS.get(order_id)
    if order is None:
        raise PermanentError(f"order {order_id!r} not found", details={"order_id": order_id})
    return order


def order_status(data_dir: Path, order_id: str) -> str:
    """The order's status now: its last change, else the built-in one ("" for an unknown order)."""
    if (data_dir / ORDERS_FILE).exists():
        with _connect(data_dir) as db:
            row = db.execute("SELECT status FROM order_status WHERE order_id = ?", (order_id,)).fetchone()
        if row is not None:
            return str(row[0])
    order = ORDERS.get(order_id)
    return order.status if order is not None else ""


def set_order_status(data_dir: Path | str, order_id: str, status: str) -> None:
    """Change an order's status, as the shop would (a test plays the shop with this)."""
    with _connect(Path(data_dir)) as db:
        db.execute(
            "INSERT INTO order_status (order_id, status, update_time_ns) VALUES (?, ?, ?)"
            " ON CONFLICT (order_id) DO UPDATE SET status = excluded.status,"
            " update_time_ns = excluded.update_time_ns",
            (order_id, status, time.time_ns()),
        )


class CancelArgs(pydantic.BaseModel):
    """Arguments of orders.cancel."""

    model_config = pydantic.ConfigDict(extra="forbid")

    order_id: str = pydantic.Field(min_length=1, max_length=64, description="Order to cancel, e.g. A100.")


@tool(
    name="orders.cancel",
    description="Cancel an order. Cancelling an order that is already cancelled changes nothing.",
    side_effect=SideEffect.WRITE,
    idempotent=True,
    timeout=5.0,
)
def cancel_order(args: CancelArgs, ctx: ToolContext) -> dict[str, Any]:
    """Mark the order cancelled in the shop's state."""
    order = find_order(args.order_id)
    set_order_status(ctx.data_dir, order.order_id, "cancelled")
    return {"order_id": order.order_id, "status": "cancelled"}
