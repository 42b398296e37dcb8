"""Control-flow signals between the run driver and its tool step."""

from __future__ import annotations


class Cancelled(Exception):
    """The in-flight call was cancelled by a cancel request (not by shutdown)."""


class Parked(Exception):
    """The run was handed back to the store to be woken later (reconciliation)."""
