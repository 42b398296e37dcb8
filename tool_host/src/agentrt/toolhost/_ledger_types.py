"""The ledger's values, shared by its backends (SQLite, PostgreSQL) and the host."""

from __future__ import annotations

import dataclasses
import enum
import json

from agentrt.toolhost._outcome import Outcome

__all__ = [
    "Busy",
    "Conflict",
    "Decision",
    "Fenced",
    "InFlight",
    "LedgerUnavailable",
    "OperationRecord",
    "OperationStatus",
    "OutcomeUnknown",
    "ReadCall",
    "Replay",
    "Start",
    "sealing_aad",
]


class LedgerUnavailable(Exception):
    """A shared ledger's database could not be reached or answered with an error.

    The message names the database without its password and the error's class, never its text.
    """


class OperationStatus(enum.Enum):
    """Where an invocation is; mirrors ``agentrt.toolhost.v1.OperationStatus``."""

    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


@dataclasses.dataclass(frozen=True, kw_only=True)
class OperationRecord:
    """One ledger entry."""

    tenant: str
    idempotency_key: str
    tool: str
    input_hash: str
    run_id: str
    call_id: str
    status: OperationStatus
    outcome: Outcome | None
    owner: str
    executions: int
    create_time_ns: int
    update_time_ns: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReadCall:
    """A read-only idempotent call running with no ledger entry; its outcome is its one write."""

    tenant: str
    idempotency_key: str
    tool: str
    input_hash: str
    run_id: str
    call_id: str
    start_time_ns: int

    def running_record(self, *, owner: str) -> OperationRecord:
        """The entry GetOperation and CancelOperation report while it runs (never written)."""
        return OperationRecord(
            tenant=self.tenant,
            idempotency_key=self.idempotency_key,
            tool=self.tool,
            input_hash=self.input_hash,
            run_id=self.run_id,
            call_id=self.call_id,
            status=OperationStatus.RUNNING,
            outcome=None,
            owner=owner,
            executions=1,
            create_time_ns=self.start_time_ns,
            update_time_ns=self.start_time_ns,
        )


@dataclasses.dataclass(frozen=True)
class Start:
    """Recorded RUNNING under this process: run the tool now."""

    record: OperationRecord


@dataclasses.dataclass(frozen=True)
class Replay:
    """A final outcome is recorded: return it, do not run the tool."""

    record: OperationRecord


@dataclasses.dataclass(frozen=True)
class Conflict:
    """The key was used before for another tool or other arguments."""

    record: OperationRecord


@dataclasses.dataclass(frozen=True)
class InFlight:
    """This process is running the same call right now: wait for it."""

    record: OperationRecord


@dataclasses.dataclass(frozen=True)
class Busy:
    """Another live host of the pool runs the same call right now: do not run it here."""

    record: OperationRecord


@dataclasses.dataclass(frozen=True)
class OutcomeUnknown:
    """An earlier host life died while a non-idempotent write ran: its effect is unknown."""

    record: OperationRecord


@dataclasses.dataclass(frozen=True)
class Fenced:
    """The run's fencing token is older than one already seen; nothing was recorded."""

    highest_token: int


Decision = Start | Replay | Conflict | InFlight | Busy | OutcomeUnknown | Fenced


def sealing_aad(tenant: str, idempotency_key: str, column: str) -> str:
    """What a sealed ledger value is bound to: its column and its tenant-scoped key.

    A sealed value copied to another key, tenant or column no longer opens.
    """
    return json.dumps(["toolhost.operations", column, tenant, idempotency_key])
