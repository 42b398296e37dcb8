"""The interface of an operation ledger, whatever stores it: SQLite (one host) or PostgreSQL (a pool).

The host calls a ledger from its event loop thread only; each method is one short transaction.
:class:`~agentrt.toolhost._ledger.Ledger` keeps a SQLite file in the host's data dir;
:class:`~agentrt.toolhost._ledger_pg.PgLedger` keeps one PostgreSQL schema that every host of a
pool shares, so a key runs at most once across the pool and any host answers ``GetOperation``.
A read-only idempotent call writes only its outcome (:meth:`LedgerBackend.record_read`): two hosts
may run the same read at once, which is harmless, and the first final outcome recorded stays.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, Protocol

from agentrt.toolhost._ledger_retention import LedgerPruneCounts
from agentrt.toolhost._ledger_types import Decision, OperationRecord, ReadCall
from agentrt.toolhost._outcome import Outcome

__all__ = ["LedgerBackend", "LedgerTransaction"]


class LedgerTransaction(Protocol):
    """A transaction on the ledger's tables; SQL is written with ``?`` placeholders.

    Rows read through it are mappings from column name to value.
    """

    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> Any:
        """Run one statement; returns a cursor (``fetchone``, ``rowcount``)."""
        ...


class LedgerBackend(Protocol):
    """An operation ledger (R5.4) with fencing tokens (R3.3); see ``_ledger`` for the semantics."""

    @property
    def owner(self) -> str:
        """Id of this host process life; RUNNING entries it starts carry it."""
        ...

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        ...

    @property
    def description(self) -> str:
        """Where the ledger lives, safe for log lines (no password)."""
        ...

    def close(self) -> None:
        """Close the ledger; later calls fail."""
        ...

    def transaction(self, *, lock_key: str = "") -> contextlib.AbstractContextManager[LedgerTransaction]:
        """One transaction, serialised against every other holder of ``lock_key`` in any process."""
        ...

    def get(self, idempotency_key: str, *, tenant: str = "") -> OperationRecord | None:
        """The entry of a key in ``tenant``, or None."""
        ...

    def begin(
        self,
        *,
        idempotency_key: str,
        tool: str,
        input_hash: str,
        run_id: str,
        call_id: str,
        rerun_after_crash: bool,
        fencing_token: int | None = None,
        tenant: str = "",
    ) -> Decision:
        """Decide what to do with a call, recording RUNNING when it is to run."""
        ...

    def finish(self, idempotency_key: str, outcome: Outcome, *, tenant: str = "") -> None:
        """Record the outcome of a call this process started."""
        ...

    def record_read(self, read: ReadCall, outcome: Outcome) -> None:
        """Record the outcome of a read-only idempotent call that recorded no RUNNING entry.

        One write: a new entry, or over an entry of the same call a retry may run again. A final
        outcome already recorded, or another call's entry under the key, is left as it is.
        """
        ...

    def settle_orphan(self, idempotency_key: str, outcome: Outcome, *, tenant: str = "") -> None:
        """Record the outcome of a call a dead owner left RUNNING, as its tool reported it."""
        ...

    def settle_unsure(self, record: OperationRecord, outcome: Outcome) -> None:
        """Replace a recorded "stopped where it stood, effect unknown" with what its tool reported."""
        ...

    def check_fence(self, run_id: str, token: int, *, tenant: str = "") -> int | None:
        """None when the token may proceed (remembered), else the higher token already seen."""
        ...

    def is_orphan(self, record: OperationRecord) -> bool:
        """True when ``record`` is RUNNING under an owner that is gone (a dead host or host life)."""
        ...

    def prune(self, cutoff_ns: int) -> LedgerPruneCounts:
        """One retention pass on a connection of its own; callable from any thread."""
        ...
