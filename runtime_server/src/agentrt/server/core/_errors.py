"""Domain errors of agentrt's core. The API maps them to gRPC statuses in one place.

Tree::

    AgentRtError                      reason, metadata
    ├── IllegalTransition             a move the transition table forbids (a bug)
    ├── InvalidRequest                bad input from a caller (INVALID_ARGUMENT)
    │   └── PayloadTooLarge           input over a size limit
    ├── NotFound                      unknown run / agent / approval (NOT_FOUND)
    ├── AlreadyExists                 a request key names another request (ALREADY_EXISTS)
    ├── FailedPrecondition            the run's state forbids the request
    ├── StaleRevision                 the caller saw an older revision of the run (ABORTED)
    ├── Unauthenticated               no credential, or a bad one (UNAUTHENTICATED)
    ├── PermissionDenied              the caller may not do this (PERMISSION_DENIED)
    ├── ResourceExhausted             a limit that protects others was hit (RESOURCE_EXHAUSTED [+ RetryInfo])
    └── LeaseLost                     this worker no longer owns the run (ABORTED)
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


class NotFound(AgentRtError):
    """The named thing does not exist (or belongs to another tenant)."""

    reason = "NOT_FOUND"


class AlreadyExists(AgentRtError):
    """What the request would create exists already, made by a different request."""

    reason = "ALREADY_EXISTS"


class FailedPrecondition(AgentRtError):
    """The run's current state forbids the request."""

    reason = "FAILED_PRECONDITION"


class StaleRevision(AgentRtError):
    """The caller's expected revision is not the run's current one; re-read and retry."""

    reason = "STALE_REVISION"


class Unauthenticated(AgentRtError):
    """The caller presented no usable credential; the message never echoes the credential."""

    reason = "UNAUTHENTICATED"


class PermissionDenied(AgentRtError):
    """The caller lacks the role the request needs (e.g. approver)."""

    reason = "PERMISSION_DENIED"


class ResourceExhausted(AgentRtError):
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
