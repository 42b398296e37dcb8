"""``refund.issue``: a write tool whose effect is a row in a real SQLite refund ledger.

The refund ledger (``<data_dir>/refunds.sqlite``) has a UNIQUE idempotency key,
so even a second effect attempt with the same key (say, after the host lost its
operation ledger) cannot refund twice.

``order_id`` is the tool's intent key, session-wide: when a model asks again (in a later step
or a later turn of the session) to refund an order it already refunded, the tool host answers
with the first refund instead of running the tool, and the model is told it was a duplicate.
Only a person approving the call with ``override_intent`` refunds the same order again.
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pydantic

from agentrt.toolhost import (
    Intent,
    IntentScope,
    InvalidInput,
    PermanentError,
    SideEffect,
    ToolContext,
    tool,
)

from ._orders import ORDERS

__all__ = [
    "REFUNDS_FILE",
    "RefundArgs",
    "count_refunds",
    "describe_refund",
    "issue_refund",
    "refunded_amount",
]

REFUNDS_FILE = "refunds.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS refunds (
    refund_id       TEXT PRIMARY KEY,
    idempotency_key TEXT NOT NULL UNIQUE,
    order_id        TEXT NOT NULL,
    amount_cents    INTEGER NOT NULL CHECK (amount_cents > 0),
    reason          TEXT NOT NULL,
    run_id          TEXT NOT NULL,
    create_time_ns  INTEGER NOT NULL
)
"""


class RefundArgs(pydantic.BaseModel):
    """Arguments of refund.issue."""

    model_config = pydantic.ConfigDict(extra="forbid")

    order_id: str = pydantic.Field(min_length=1, max_length=64, description="Order to refund, e.g. A100.")
    amount: float = pydantic.Field(gt=0, le=10000, description="Amount to refund, in the order's currency.")
    reason: str = pydantic.Field(
        min_length=1, max_length=500, description="Why the customer gets money back."
    )


@contextlib.contextmanager
def _connect(path: Path) -> Iterator[sqlite3.Connection]:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, isolation_level=None, timeout=10.0)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(_SCHEMA)
        yield db
    finally:
        db.close()


def _cents(amount: float) -> int:
    return round(amount * 100)


@tool(
    name="refund.issue",
    description=(
        "Refund (part of) an order to the customer. Moves money: each call with a new idempotency key "
        "is a new refund, and the refunds of an order cannot exceed its amount."
    ),
    side_effect=SideEffect.WRITE,
    idempotent=False,
    supports_query=True,
    timeout=10.0,
    intent=Intent(arguments=("order_id",), scope=IntentScope.SESSION),
)
def issue_refund(args: RefundArgs, ctx: ToolContext) -> dict[str, Any]:
    """Record the refund under the call's idempotency key and return it."""
    order = ORDERS.get(args.order_id)
    if order is None:
        raise PermanentError(f"order {args.order_id!r} not found", details={"order_id": args.order_id})
    cents = _cents(args.amount)
    if cents <= 0:
        raise InvalidInput("amount rounds to zero cents", details={"amount": args.amount})
    refund_id = "RF-" + hashlib.sha256(ctx.idempotency_key.encode()).hexdigest()[:12]
    with _connect(ctx.data_dir / REFUNDS_FILE) as db:
        db.execute("BEGIN IMMEDIATE")
        try:
            existing = db.execute(
                "SELECT refund_id, order_id, amount_cents FROM refunds WHERE idempotency_key = ?",
                (ctx.idempotency_key,),
            ).fetchone()
            if existing is None:
                (refunded,) = db.execute(
                    "SELECT COALESCE(SUM(amount_cents), 0) FROM refunds WHERE order_id = ?", (order.order_id,)
                ).fetchone()
                if refunded + cents > _cents(order.amount):
                    raise PermanentError(
                        f"refunds of order {order.order_id} would exceed its amount {order.amount:.2f}",
                        details={"order_id": order.order_id, "already_refunded": refunded / 100},
                    )
                # The UNIQUE key is the last line of defence against a double refund.
                db.execute(
                    "INSERT INTO refunds (refund_id, idempotency_key, order_id, amount_cents, reason, run_id,"
                    " create_time_ns) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        refund_id,
                        ctx.idempotency_key,
                        order.order_id,
                        cents,
                        args.reason,
                        ctx.run_id,
                        time.time_ns(),
                    ),
                )
            elif (existing[1], existing[2]) != (order.order_id, cents):
                raise PermanentError("this idempotency key already refunded another order or amount")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    return {
        "refund_id": refund_id,
        "order_id": order.order_id,
        "amount": cents / 100,
        "currency": order.currency,
        "status": "issued",
    }


def query_refund(idempotency_key: str, data_dir: Path) -> dict[str, Any]:
    """What the refund ledger says about a key: the recorded refund, or that none happened."""
    path = data_dir / REFUNDS_FILE
    if not path.exists():
        return {"status": "absent"}
    with _connect(path) as db:
        row = db.execute(
            "SELECT refund_id, order_id, amount_cents FROM refunds WHERE idempotency_key = ?",
            (idempotency_key,),
        ).fetchone()
    if row is None:
        return {"status": "absent"}
    order = ORDERS.get(row[1])
    result = {
        "refund_id": row[0],
        "order_id": row[1],
        "amount": row[2] / 100,
        "currency": order.currency if order is not None else "",
        "status": "issued",
    }
    return {"status": "succeeded", "result": result}


def refunded_amount(data_dir: Path, order_id: str) -> float:
    """What the refunds of an order add up to so far (0 when none)."""
    path = data_dir / REFUNDS_FILE
    if not path.exists():
        return 0.0
    with _connect(path) as db:
        (cents,) = db.execute(
            "SELECT COALESCE(SUM(amount_cents), 0) FROM refunds WHERE order_id = ?", (order_id,)
        ).fetchone()
    return int(cents) / 100


def count_refunds(path: Path | str) -> int:
    """Count the refunds recorded in a refund ledger file (0 if it does not exist).

    Args:
        path: ``<data_dir>/refunds.sqlite``, or the data dir itself.

    Returns:
        The number of refund rows.
    """
    path = Path(path)
    if path.is_dir():
        path = path / REFUNDS_FILE
    if not path.exists():
        return 0
    db = sqlite3.connect(path)
    try:
        (count,) = db.execute("SELECT COUNT(*) FROM refunds").fetchone()
        return int(count)
    except sqlite3.OperationalError:  # the file exists but no refund was ever written
        return 0
    finally:
        db.close()


def describe_refund(arguments: Mapping[str, Any]) -> str:
    """The impact summary of a ``refund.issue`` call, for approvers."""
    order_id = str(arguments.get("order_id", ""))
    amount = float(arguments.get("amount", 0))
    reason = str(arguments.get("reason", ""))
    order = ORDERS.get(order_id)
    if order is None:
        return f"Refund {amount:.2f} for order {order_id}, which does not exist: the call will fail."
    return (
        f"Refund {amount:.2f} {order.currency} to {order.customer} for order {order.order_id} "
        f"(order amount {order.amount:.2f} {order.currency}, status {order.status}). Reason: {reason}. "
        "Money leaves the company and is not taken back automatically."
    )
