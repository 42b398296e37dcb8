"""Refusing a request key reused for a different request (DESIGN R8.2)."""

from __future__ import annotations

from agentrt.server.core import RequestKeyReused
from agentrt.server.store import RunRecord

__all__ = ["same_request"]


def same_request(found: RunRecord, request_key: str, request_hash: str) -> RunRecord:
    """``found`` (the run ``request_key`` started) when this request is the one that started it.

    A run stored before request hashes existed (``request_hash`` NULL) matches any request: what
    it was started with cannot be known, and refusing every retry of it would break callers
    that did nothing wrong. A start without a hash (a child run, keyed by its parent's call)
    is not checked either.

    Raises:
        RequestKeyReused: ``REQUEST_KEY_REUSED``, the key started a run for another request.
    """
    if not found.request_hash or not request_hash or found.request_hash == request_hash:
        return found
    raise RequestKeyReused(
        "this request_key was used for a different request (agent, input, session, budgets or "
        "metadata); use a new key for a new request",
        reason="REQUEST_KEY_REUSED",
        metadata={"request_key": request_key, "run_id": found.run_id},
    )
