"""Domain errors of agentrt's core. The API maps them to gRPC statuses in one place.

Named for what happened, not for how the API reports it; ``api/_errors.py`` maps each to a
gRPC status in one place. A class's default ``reason`` is the stable string callers see in the
status's ErrorInfo (kept as it was when these classes carried the status names).

Tree::

    AgentRtError                a stable reason, metadata
    ├── IllegalTransition       a move the transition table forbids (a bug)
    ├── InvalidRequest          bad input from a caller
    │   └── PayloadTooLarge     input over a size limit
    ├── NoSuchResource          unknown run / agent / approval / payload (or another tenant's)
    ├── RequestKeyReused        a request key names another request
    ├── RunStateConflict        the run's state forbids the request (ended, busy session, ...)
    ├── StaleRevision           the caller saw an older revision of the run
    ├── NotAuthenticated        no credential, or a bad one
    ├── NotPermitted            the caller may not do this
    ├── OverLimit               a limit that protects others was hit (retry_after_s says when)
    └── LeaseLost               this worker no longer owns the run
"""

from __future__ import annotations

from collections.abc import Mapping


class AgentRtError(Exception):
    """Base of agentrt's domain errors: a stable ``reason`` plus string metadata."""

    reason: str = "AGENTRT_ERROR"

    def __init__(self, message: str, *, reason: str | None = None, metadata: Mapping[str, str] | None = None):
        super().__init__(message)
        self.message = message
        if reason is not None:
            self.reason = reason
        self.metadata: dict[str, str] = dict(metadata or {})


class IllegalTransition(AgentRtError):
    """The transition table has no rule for this (phase, trigger)."""

    reason = "ILLEGAL_TRANSITION"

    def __init__(self, *, phase: str, trigger: str):
        super().__init__(
            f"illegal transition: {trigger} in phase {phase}", metadata={"phase": phase, "trigger": trigger}
        )
        self.phase = phase
        self.trigger = trigger


class InvalidRequest(AgentRtError):
    """A caller sent something malformed; ``field`` names the offending field."""

    reason = "INVALID_REQUEST"

    def __init__(
        self,
        message: str,
        *,
        field: str,
        reason: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ):
        super().__init__(message, reason=reason, metadata={"field": field, **(metadata or {})})
        self.field = field


class PayloadTooLarge(InvalidRequest):
    """A field is over its size limit."""

    reason = "PAYLOAD_TOO_LARGE"


class NoSuchResource(AgentRtError):
    """The named thing does not exist (or belongs to another tenant)."""

    reason = "NOT_FOUND"


class RequestKeyReused(AgentRtError):
    """What the request would create exists already, made by a different request."""

    reason = "ALREADY_EXISTS"


class RunStateConflict(AgentRtError):
    """The run's current state forbids the request."""

    reason = "FAILED_PRECONDITION"


class StaleRevision(AgentRtError):
    """The caller's expected revision is not the run's current one; re-read and retry."""

    reason = "STALE_REVISION"


class NotAuthenticated(AgentRtError):
    """The caller presented no usable credential; the message never echoes the credential."""

    reason = "UNAUTHENTICATED"


class NotPermitted(AgentRtError):
    """The caller lacks the role the request needs (e.g. approver)."""

    reason = "PERMISSION_DENIED"


class OverLimit(AgentRtError):
    """A limit that protects other callers was hit: queued or active runs (``retry_after_s`` says when
    to try again), a stream reader that stopped reading."""

    reason = "RESOURCE_EXHAUSTED"

    def __init__(
        self,
        message: str,
        *,
        retry_after_s: float | None = None,
        reason: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ):
        super().__init__(message, reason=reason, metadata=metadata)
        self.retry_after_s = retry_after_s


class LeaseLost(AgentRtError):
    """A fenced write found another owner or revision: this worker must stop."""

    reason = "LEASE_LOST"
