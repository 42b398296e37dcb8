"""What a tool call attempt came back with, as typed facts (the router fills it in; the core reads it).

Facts, never text: the tool host's typed error code, and how the attempt went on the wire:
whether its own time ran out, whether it provably never left, whether the transport broke
after it may have left, and whether the host itself says it cannot tell what the tool did.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from agentrt.server.core._events import ToolError, ToolErrorCode

__all__ = ["LedgerSilence", "LedgerWord", "ToolOutcome"]


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """A tool call's result JSON, or its typed error, and the facts of its delivery."""

    result_json: str | None
    error: ToolError | None
    replayed: bool = False  # the host answered from its ledger (the same key ran before)
    # -- delivery facts (see in_doubt) ---------------------------------------------------------------
    timed_out: bool = False  # the attempt's own time ran out (its deadline, or the wait for a slot)
    never_sent: bool = False  # provably never left: no connection, no free slot, no host serves it
    connect_failed: bool = False  # no connection to the host could be made (with never_sent)
    transport_lost: bool = False  # the transport broke after the request may have left
    host_unsure: bool = False  # the host's own word: it stopped the tool where it stood
    still_running: bool = False  # the host's own word: the tool has not stopped yet
    # The host's own word: it stopped the tool at the call's deadline. Counted as a timeout; the
    # verdict reads host_unsure / still_running, which the host sets with it.
    host_timed_out: bool = False
    # The host's own word (RetryInfo, with never_sent): it took nothing of the call and asks not
    # to be sent it again for this many seconds (it is draining). None: no such word.
    retry_after_s: float | None = None
    # -- where a result went ---------------------------------------------------------------------------
    # Set when the result is stored as a payload: its reference (proto3 JSON of PayloadRef), and
    # whether result_json is a truncated view of it.
    result_ref: dict[str, Any] | None = None
    truncated: bool = False
    # The host answered with an earlier call's result (same business intent); proto3 JSON of
    # IntentDuplicate, naming that call.
    deduplicated: bool = False
    duplicate_of: dict[str, Any] | None = None
    host: str = ""  # the configured name of the tool host that answered, when one did
    # A large result's members addressed to the runtime (``_cleanup``, ``_set_variables``) as a
    # JSON object, kept when result_json became a view of the payload (or a refusal) without them.
    runtime_json: str | None = None

    @classmethod
    def failure(
        cls,
        code: ToolErrorCode | str,
        message: str,
        *,
        details_json: str = "",
        timed_out: bool = False,
        never_sent: bool = False,
        connect_failed: bool = False,
        transport_lost: bool = False,
        host_unsure: bool = False,
        still_running: bool = False,
        host_timed_out: bool = False,
        retry_after_s: float | None = None,
    ) -> ToolOutcome:
        """A failed attempt; ``code`` is a ToolErrorCode or its name (``"TRANSIENT"``)."""
        return cls(
            None,
            ToolError(ToolErrorCode(code), message, details_json),
            timed_out=timed_out,
            never_sent=never_sent or connect_failed,
            connect_failed=connect_failed,
            transport_lost=transport_lost,
            host_unsure=host_unsure,
            still_running=still_running,
            host_timed_out=host_timed_out,
            retry_after_s=retry_after_s,
        )

    @property
    def code(self) -> ToolErrorCode | None:
        """The typed error's code; None when the call succeeded."""
        return self.error.code if self.error is not None else None

    @property
    def in_doubt(self) -> bool:
        """The call may have taken effect without anyone knowing: a write is looked up first."""
        if self.host_unsure or self.still_running:
            return True
        return not self.never_sent and (self.timed_out or self.transport_lost)


class LedgerSilence(StrEnum):
    """A ledger query that brought no outcome."""

    NOT_FOUND = "not_found"  # the host has no entry: the call never reached its ledger
    UNKNOWN = "unknown"  # still running, unreachable, or the host cannot say


LedgerWord = ToolOutcome | LedgerSilence  # the recorded outcome, or why there is none
