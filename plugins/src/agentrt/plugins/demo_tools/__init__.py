"""The demo tools plugin (entry point ``demo_tools`` in group ``agentrt.tools``).

Tools:

- ``orders.lookup`` (READ_ONLY, idempotent): an order of the built-in table A100..A105 with its
  status now and what was refunded; an unknown id is a PERMANENT error. Sets the run variables
  ``order_id`` and ``order_status``.
- ``orders.cancel`` (WRITE, idempotent): marks an order cancelled in ``<data_dir>/orders.sqlite``.
- ``refund.issue`` (WRITE, supports_query): a refund row in ``<data_dir>/refunds.sqlite``,
  unique per idempotency key; its intent key is ``order_id``, session-wide.
- ``sleep.wait`` (READ_ONLY, async): sleeps, honouring cancellation and deadlines; logs to
  ``<data_dir>/sleep_events.log``.
- ``noop.echo`` (READ_ONLY, idempotent): returns its arguments.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentrt.toolhost import Tool, ToolHostConfig, hookimpl

from ._echo import EchoArgs, echo
from ._lookup import LookupArgs, lookup_order
from ._orders import ORDERS, ORDERS_FILE, CancelArgs, Order, cancel_order, order_status, set_order_status
from ._refunds import (
    REFUNDS_FILE,
    RefundArgs,
    count_refunds,
    describe_refund,
    issue_refund,
    query_refund,
    refunded_amount,
)
from ._sleep import SLEEP_LOG_FILE, SleepArgs, sleep_wait

__all__ = [
    "ORDERS",
    "ORDERS_FILE",
    "REFUNDS_FILE",
    "SLEEP_LOG_FILE",
    "CancelArgs",
    "EchoArgs",
    "LookupArgs",
    "Order",
    "RefundArgs",
    "SleepArgs",
    "agentrt_preview_tool",
    "agentrt_query_operation",
    "agentrt_register_tools",
    "cancel_order",
    "count_refunds",
    "describe_refund",
    "echo",
    "issue_refund",
    "lookup_order",
    "order_status",
    "query_refund",
    "refunded_amount",
    "set_order_status",
    "sleep_wait",
]


@hookimpl
def agentrt_register_tools(config: ToolHostConfig) -> list[Tool]:
    """The demo tools; they keep their files under ``config.data_dir`` (via ``ctx.data_dir``)."""
    return [lookup_order, cancel_order, issue_refund, sleep_wait, echo]


@hookimpl
def agentrt_preview_tool(tool: str, arguments: dict[str, Any]) -> str | None:
    """Describe refunds for approvers; other tools get the host's default summary."""
    if tool == issue_refund.name:
        return describe_refund(arguments)
    return None


@hookimpl
def agentrt_query_operation(tool: str, idempotency_key: str, data_dir: Path) -> dict[str, Any] | None:
    """Settle a refund whose host died mid-call from the refund ledger itself."""
    if tool != "refund.issue":
        return None
    return query_refund(idempotency_key, data_dir)
