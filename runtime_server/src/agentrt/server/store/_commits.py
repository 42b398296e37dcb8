"""A commit as the engine states it: typed events and a frozen row update, encoded here.

The engine says *what* changed (a phase, a usage, the approval it waits for, the lease given back);
only the store knows the columns, their JSON, and that PostgreSQL text cannot hold NUL. Both run
logs, the store and ``agentrt.testing``'s in-memory one, encode through :func:`encode_commit`, so
what the engine's in-process tests commit is byte for byte what production commits.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

from agentrt.server.core import AgentRtError, ApprovalRequested, Budgets, Event, Phase, RunEnded, Usage
from agentrt.server.core import events as ev
from agentrt.server.store._event_codec import call_summary_json, encode_event
from agentrt.server.store._records import StoredEvent

__all__ = [
    "KEEP",
    "MAX_EVENT_BYTES",
    "CleanupColumns",
    "Committed",
    "EventTooLarge",
    "Keep",
    "RowUpdate",
    "TypedCommits",
    "encode_commit",
    "row_values",
    "utf8_size",
]

# No stored event may come near the 4 MiB gRPC response cap: past this one the commit is refused
# (a fault of the run) rather than a log written that no stream could ever send again.
MAX_EVENT_BYTES = 3 * 1024 * 1024


class EventTooLarge(AgentRtError):
    """An event would exceed MAX_EVENT_BYTES; nothing is committed (a bug: every large value has a path)."""

    reason = "EVENT_TOO_LARGE"


class Keep(enum.Enum):
    """A nullable column the update leaves as it is (``None`` there means: set it to NULL)."""

    KEEP = "keep"


KEEP: Final = Keep.KEEP


@dataclass(frozen=True, slots=True)
class CleanupColumns:
    """The row's cleanup columns: what GetRun and the cleanup job's claim read."""

    status: str  # "" for a run that registered none
    unknown: int
    due_ms: int | None  # when the cleanup job should try again; None: nothing left for it


@dataclass(frozen=True, slots=True, kw_only=True)
class RowUpdate:
    """What one commit changes on the run's row; a field left at its default is not touched."""

    phase: Phase | None = None
    usage: Usage | None = None
    output: str | None = None
    reason: str | None = None
    pending_approval: ApprovalRequested | Literal[Keep.KEEP] | None = KEEP
    unknown_call_id: str | Literal[Keep.KEEP] | None = KEEP  # ResolveOutcome is checked against it
    output_ref: ev.PayloadRef | Literal[Keep.KEEP] | None = KEEP
    budgets: Budgets | None = None
    deadline_ms: int | None = None
    variables_json: str | None = None  # canonical already (core.variables_json): it is also a size
    state_version: int | None = None
    fault_count: int | None = None
    wake_ms: int | None = None
    release_lease: bool = False
    needs_attention: bool | None = None
    cleanup: CleanupColumns | None = None
    cleanup_retries: int | None = None
    reconcile_attempts: int | None = None
    ended: RunEnded | None = None  # a partial end: its call lists become GetRun's summary

    def then(self, later: RowUpdate) -> RowUpdate:
        """This update followed by ``later``: what ``later`` sets wins."""
        changes = {
            f.name: value for f in dataclasses.fields(later) if (value := getattr(later, f.name)) != f.default
        }
        return dataclasses.replace(self, **changes) if changes else self


def _text(value: str) -> str:
    # PostgreSQL text cannot hold NUL: the row gets U+FFFD, the event (JSON-escaped) the exact text.
    return value.replace("\x00", "\ufffd")


def row_values(update: RowUpdate) -> dict[str, Any]:
    """The run row's columns for ``update``, as the store writes them."""
    values: dict[str, Any] = {}
    if update.phase is not None:
        values["phase"] = update.phase.value
    if update.usage is not None:
        values["usage"] = json.dumps(update.usage.to_json())
    if update.output is not None:
        values["output"] = _text(update.output)
    if update.reason is not None:
        values["reason"] = _text(update.reason)
    if update.pending_approval is not KEEP:
        pending = update.pending_approval
        values["pending_approval"] = encode_event(pending)[1] if pending is not None else None
    if update.unknown_call_id is not KEEP:
        call_id = update.unknown_call_id
        values["unknown_call_id"] = _text(call_id) if call_id is not None else None
    if update.output_ref is not KEEP:
        ref = update.output_ref
        values["output_ref"] = json.dumps(ref.to_json()) if ref is not None else None
    if update.budgets is not None:
        values["budgets"] = json.dumps(update.budgets.to_json())
    if update.deadline_ms is not None:
        values["deadline_ms"] = update.deadline_ms
    if update.variables_json is not None:
        values["variables"] = update.variables_json
    if update.state_version is not None:
        values["state_version"] = update.state_version
    if update.fault_count is not None:
        values["fault_count"] = update.fault_count
    if update.wake_ms is not None:
        values["wake_ms"] = update.wake_ms
    if update.release_lease:
        values.update(lease_owner=None, lease_expires_ms=None)
    if update.needs_attention is not None:
        values["needs_attention"] = update.needs_attention
    if update.cleanup is not None:
        cleanup = update.cleanup
        values.update(
            cleanup_status=cleanup.status or None,
            cleanups_unknown=cleanup.unknown,
            cleanup_due_ms=cleanup.due_ms,
        )
    if update.cleanup_retries is not None:
        values["cleanup_retries"] = update.cleanup_retries
    if update.reconcile_attempts is not None:
        values["reconcile_attempts"] = update.reconcile_attempts
    if update.ended is not None and update.ended.partial:
        values["call_summary"] = call_summary_json(update.ended)
    return values


def encode_commit(events: Sequence[Event], update: RowUpdate) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """``(type, JSON)`` of each event and the row's column values, as one commit writes them.

    Raises:
        EventTooLarge: an event's JSON is past MAX_EVENT_BYTES, naming its type and size, never
            its content; nothing is written.
    """
    payloads = [encode_event(e) for e in events]
    for event_type, payload in payloads:
        if len(payload) * 4 > MAX_EVENT_BYTES and utf8_size(payload) > MAX_EVENT_BYTES:
            raise EventTooLarge(
                f"a {event_type} event of {utf8_size(payload)} bytes is past {MAX_EVENT_BYTES}",
                metadata={"event_type": event_type},
            )
    return payloads, row_values(update)


def utf8_size(text: str) -> int:
    """Bytes of ``text`` in UTF-8, without encoding it when the answer is plain from its length."""
    if text.isascii():
        return len(text)
    return len(text.encode())


@dataclass(frozen=True, slots=True)
class Committed:
    """A commit that landed: the row's new revision and the events as stored (for live readers)."""

    revision: int
    events: list[StoredEvent]


class _AppendsEncoded(Protocol):
    async def append(
        self,
        run_id: str,
        *,
        expected_revision: int,
        owner: str,
        first_seq: int,
        new_events: Sequence[tuple[str, str]],
        values: Mapping[str, Any],
        now_ms: int,
        consume_signals: Sequence[int] = (),
    ) -> int: ...


class TypedCommits:
    """``commit`` for a run log whose ``append`` writes encoded events and column values."""

    async def commit(
        self: _AppendsEncoded,
        run_id: str,
        *,
        expected_revision: int,
        owner: str,
        first_seq: int,
        events: Sequence[Event],
        update: RowUpdate,
        now_ms: int,
        consume_signals: Sequence[int] = (),
    ) -> Committed:
        """Append ``events`` at ``first_seq`` and apply ``update``, fenced by revision and owner.

        Raises:
            EventTooLarge: an event is past MAX_EVENT_BYTES; nothing is written.
            LeaseLost: the run's revision or owner is not what this worker expects.
        """
        payloads, values = encode_commit(events, update)
        revision = await self.append(
            run_id,
            expected_revision=expected_revision,
            owner=owner,
            first_seq=first_seq,
            new_events=payloads,
            values=values,
            now_ms=now_ms,
            consume_signals=consume_signals,
        )
        stored = [StoredEvent(run_id, first_seq + i, t, p, now_ms) for i, (t, p) in enumerate(payloads)]
        return Committed(revision, stored)
