"""Business-intent dedup (S004 §10.2): a second call with the same intent in scope does not run.

An idempotency key only dedups retries of one call. When a model asks again in a later step
for something already done ("refund order A100"), the call has a new key. A tool that declares
an :class:`~agentrt.toolhost.Intent` names the arguments that make its intent; their values with
the tool name hash to an intent key, unique within a scope: the run, the session or the tenant
(and, optionally, a time window).

The ledger keeps one claim per intent in scope (table ``intents``): the idempotency key of the
call that claimed it. A call with another key then gets, from :meth:`Intents.claim`:

- :class:`Duplicate` when the claimant SUCCEEDED: the host answers with that recorded result,
  marked deduplicated, and the tool does not run;
- :class:`Pending` while the claimant runs (or its outcome is unknown): wait or try again later;
- :class:`Proceed` otherwise, taking the claim over: the claimant failed (the intent was not
  fulfilled), the window passed, the claim is stale, or the call carries an approved override.

A claim is checked and taken in one transaction (``BEGIN IMMEDIATE`` in SQLite; under an advisory
lock on the intent in a shared PostgreSQL ledger), and the host records the
call RUNNING (``Ledger.begin``) right after without yielding its event loop, so two calls of
one host process can never both proceed. A claim whose claimant never reached ``begin`` (it was
refused, say FENCED) has no ledger entry: this host life's own such claims are taken over at
once; another process's only after :data:`STALE_CLAIM_S`, because that process may be between
its claim and its ``begin``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable
from typing import Any

from agentrt.toolhost._ledger_backend import LedgerBackend
from agentrt.toolhost._ledger_types import OperationRecord, OperationStatus
from agentrt.toolhost._sdk import IntentScope, Tool, canonical_json

__all__ = ["STALE_CLAIM_S", "Duplicate", "IntentCall", "Intents", "Pending", "Proceed", "intent_of"]

STALE_CLAIM_S = 60.0
"""Seconds after which another process's claim without a ledger entry is taken over."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class IntentCall:
    """A call's intent: its key and the scope it must be unique in."""

    key: str  # sha256 (hex) of the tool name and the intent argument values
    scope: IntentScope
    scope_id: str  # the run id, the session id, or "" for the tenant
    window_s: float | None


@dataclasses.dataclass(frozen=True)
class Proceed:
    """The claim is this call's: run it."""

    overridden: bool = False  # it took over a live claim through an approved override


@dataclasses.dataclass(frozen=True)
class Duplicate:
    """The intent was fulfilled by an earlier call: answer with its recorded result."""

    first: OperationRecord


@dataclasses.dataclass(frozen=True)
class Pending:
    """The earlier call with this intent is running, or its outcome is not known yet."""

    first_key: str


IntentDecision = Proceed | Duplicate | Pending


def intent_of(tool: Tool, arguments: Any, *, run_id: str, session_id: str) -> IntentCall | None:
    """The intent of a call of ``tool`` with the parsed ``arguments``; None when it has none.

    A call that leaves an intent argument out (or null) names no intent: it is deduplicated by
    its idempotency key only. A session-scoped intent of a run without a session is scoped to
    the run; a run- or session-scoped intent of a call from no run (no run id: a direct caller,
    not the runtime) has no scope and names no intent.
    """
    intent = tool.intent
    if intent is None or not isinstance(arguments, dict):
        return None
    values = {name: arguments.get(name) for name in intent.arguments}
    if any(value is None for value in values.values()):
        return None
    key = hashlib.sha256(canonical_json([tool.name, values]).encode()).hexdigest()
    scope = intent.scope
    if scope is IntentScope.SESSION and not session_id:
        scope = IntentScope.RUN
    if scope is IntentScope.RUN and not run_id:
        return None
    scope_id = {IntentScope.RUN: run_id, IntentScope.SESSION: session_id, IntentScope.TENANT: ""}[scope]
    return IntentCall(key=key, scope=scope, scope_id=scope_id, window_s=intent.window)


_SELECT = (
    "SELECT idempotency_key, owner, claim_time_ns FROM intents"
    " WHERE tenant = ? AND scope = ? AND scope_id = ? AND intent_key = ?"
)
_CLAIM = (
    "INSERT INTO intents (tenant, scope, scope_id, intent_key, idempotency_key, owner, claim_time_ns)"
    " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, scope, scope_id, intent_key) DO UPDATE SET"
    " idempotency_key = excluded.idempotency_key, owner = excluded.owner,"
    " claim_time_ns = excluded.claim_time_ns"
)


class Intents:
    """The intent claims of one ledger.

    Args:
        ledger: The host's ledger; claims live in its file, read on its connection (event loop
            thread only, like the ledger).
        clock_ns: Epoch nanoseconds (tests pass their own to move a window).
        stale_claim_s: See :data:`STALE_CLAIM_S`.
    """

    def __init__(
        self,
        ledger: LedgerBackend,
        *,
        clock_ns: Callable[[], int] = time.time_ns,
        stale_claim_s: float = STALE_CLAIM_S,
    ) -> None:
        self._ledger = ledger
        self._clock_ns = clock_ns
        self._stale_ns = round(stale_claim_s * 1e9)

    def claim(self, call: IntentCall, *, tenant: str, idempotency_key: str, override: bool) -> IntentDecision:
        """Decide whether the call with ``idempotency_key`` may run its intent; claim it if so.

        Args:
            call: The call's intent.
            tenant: The tenant of the call grant; claims of tenants never meet.
            idempotency_key: The call's key; a retry of the claimant itself proceeds.
            override: A person approved running this call even if it repeats the intent.
        """
        now = self._clock_ns()
        scope = (tenant, call.scope.value, call.scope_id, call.key)
        # The lock serialises claims of one intent across the hosts of a pool sharing a ledger.
        with self._ledger.transaction(lock_key="intent:" + "\x1f".join(scope)) as db:
            row = db.execute(_SELECT, scope).fetchone()
            overridden = False
            if row is not None and row["idempotency_key"] != idempotency_key:
                live = call.window_s is None or now - int(row["claim_time_ns"]) < call.window_s * 1e9
                if live and not override:
                    decision = self._earlier(row, tenant=tenant, now=now)
                    if decision is not None:
                        return decision
                overridden = live and override
            elif row is not None:
                return Proceed()  # a retry of the claimant: the ledger decides by its key
            db.execute(_CLAIM, (*scope, idempotency_key, self._ledger.owner, now))
        return Proceed(overridden=overridden)

    def _earlier(self, row: Any, *, tenant: str, now: int) -> IntentDecision | None:
        """What the live claim of another call means; None when it may be taken over."""
        first_key = str(row["idempotency_key"])
        first = self._ledger.get(first_key, tenant=tenant)
        if first is None:
            # The claimant never recorded RUNNING. Ours: refused before it ran. Another process's:
            # it may be between its claim and its begin, unless the claim is old.
            mine = row["owner"] == self._ledger.owner
            return None if mine or now - int(row["claim_time_ns"]) >= self._stale_ns else Pending(first_key)
        if first.status is OperationStatus.SUCCEEDED:
            return Duplicate(first)
        if first.status is OperationStatus.RUNNING:
            return Pending(first_key)
        return None  # it failed: the intent was not fulfilled, so this call may try
