"""gRPC status errors of the tool host, with ``google.rpc`` details, in one place.

Tool failures are not gRPC errors: they travel in ``InvokeToolResponse.error``.
gRPC statuses are for calls the host cannot take at all (R3.5, R10.4).

Error tree::

    RpcFailure                          code, reason, ErrorInfo{reason, domain, metadata}
    ├── InvalidRequest                  INVALID_ARGUMENT + BadRequest
    │   reasons: MISSING_IDEMPOTENCY_KEY, INVALID_METADATA, INVALID_ARGUMENTS, MISSING_FIELD
    ├── NotFound                        NOT_FOUND
    │   reasons: OPERATION_NOT_FOUND, UNKNOWN_TOOL
    ├── Unauthenticated                 UNAUTHENTICATED: no call grant the host can trust
    │   reasons: GRANT_REQUIRED, GRANT_INVALID, GRANT_EXPIRED, GRANT_TOO_LONG, GRANT_UNKNOWN_KEY
    ├── PermissionDenied                PERMISSION_DENIED: a valid grant, but for another call
    │   reasons: GRANT_MISMATCH
    ├── Draining                        UNAVAILABLE + RetryInfo: the host is shutting down and
    │   reasons: DRAINING               took nothing of the call; send it to another host or later
    └── InternalFailure                 INTERNAL
        reasons: INTERNAL, PREVIEW_FAILED
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NoReturn

import grpc
import grpc.aio
from google.protobuf import any_pb2, duration_pb2

# googleapis-common-protos ships no type information.
from google.rpc import code_pb2, error_details_pb2, status_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status

__all__ = [
    "DOMAIN",
    "Draining",
    "InternalFailure",
    "InvalidRequest",
    "NotFound",
    "PermissionDenied",
    "RpcFailure",
    "StaleFencingToken",
    "Unauthenticated",
    "abort_with",
]

DOMAIN = "toolhost.agentrt"

_CODES: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.INVALID_ARGUMENT: code_pb2.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND: code_pb2.NOT_FOUND,
    grpc.StatusCode.UNAUTHENTICATED: code_pb2.UNAUTHENTICATED,
    grpc.StatusCode.PERMISSION_DENIED: code_pb2.PERMISSION_DENIED,
    grpc.StatusCode.FAILED_PRECONDITION: code_pb2.FAILED_PRECONDITION,
    grpc.StatusCode.INTERNAL: code_pb2.INTERNAL,
    grpc.StatusCode.UNAVAILABLE: code_pb2.UNAVAILABLE,
}


class RpcFailure(Exception):
    """A call the host refuses with a gRPC status.

    Args:
        message: Status message; must not leak internals.
        reason: Stable ``ErrorInfo.reason`` (UPPER_SNAKE_CASE).
        metadata: ``ErrorInfo.metadata``.
    """

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(self, message: str, *, reason: str, metadata: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.metadata: dict[str, str] = dict(metadata or {})

    def extra_details(self) -> list[any_pb2.Any]:
        """Details beyond ErrorInfo."""
        return []


class InvalidRequest(RpcFailure):
    """Bad request metadata or fields; carries a ``BadRequest`` with one violation per field.

    Args:
        message: Status message.
        reason: ErrorInfo reason.
        violations: ``(field, description)`` pairs.
        metadata: ErrorInfo metadata.
    """

    code = grpc.StatusCode.INVALID_ARGUMENT

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        violations: Sequence[tuple[str, str]],
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message, reason=reason, metadata=metadata)
        self.violations = list(violations)

    def extra_details(self) -> list[any_pb2.Any]:
        bad_request = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(field=field, description=description)
                for field, description in self.violations
            ]
        )
        packed = any_pb2.Any()
        packed.Pack(bad_request)
        return [packed]


class NotFound(RpcFailure):
    """The named operation or tool does not exist."""

    code = grpc.StatusCode.NOT_FOUND


class Unauthenticated(RpcFailure):
    """The call carries no grant the host trusts: missing, malformed, unknown key or expired."""

    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(RpcFailure):
    """The grant is genuine but binds another call (tool, arguments, key, run, call or fencing token)."""

    code = grpc.StatusCode.PERMISSION_DENIED


class StaleFencingToken(RpcFailure):
    """The caller's fencing token is older than one the host has seen for its run: a stale owner."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class Draining(RpcFailure):
    """SIGTERM: the host finishes the calls it has and takes no new one; nothing of this one was
    recorded or run, so the caller may send it again, with the same key, elsewhere or later.

    Args:
        retry_after_s: The ``RetryInfo`` delay: about when the host is gone (or back, restarted).
    """

    code = grpc.StatusCode.UNAVAILABLE

    def __init__(self, *, retry_after_s: float) -> None:
        super().__init__("the tool host is draining; the call was not started", reason="DRAINING")
        self.retry_after_s = retry_after_s

    def extra_details(self) -> list[any_pb2.Any]:
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(int(self.retry_after_s * 1e9))
        packed = any_pb2.Any()
        packed.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
        return [packed]


class InternalFailure(RpcFailure):
    """A host bug or a plugin hook failure; the message names no internals."""

    code = grpc.StatusCode.INTERNAL


def to_status(exc: RpcFailure) -> grpc.Status:
    """Return the gRPC status (code, message, ``grpc-status-details-bin`` trailer) of ``exc``."""
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason=exc.reason, domain=DOMAIN, metadata=exc.metadata))
    details = [info, *exc.extra_details()]
    status = status_pb2.Status(code=_CODES[exc.code], message=exc.message, details=details)
    return rpc_status.to_status(status)


async def abort_with(context: grpc.aio.ServicerContext[object, object], exc: RpcFailure) -> NoReturn:
    """End the call with the status of ``exc``.

    The async ``ServicerContext`` lacks ``abort_with_status`` (grpc/grpc#42733),
    so the details trailer is passed to ``abort`` directly.
    """
    status = to_status(exc)
    await context.abort(status.code, status.details, trailing_metadata=status.trailing_metadata)
