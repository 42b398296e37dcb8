"""The one place domain errors become gRPC statuses with google.rpc details (R3.5).

Every status carries ``ErrorInfo{reason, domain, metadata}``; invalid input adds
``BadRequest`` field violations, state conflicts add ``PreconditionFailure``, a limit reached adds
``RetryInfo``.

An exception no handler expected is classified by ``store.environmental``: the store (or the
network, or the OS) failing is UNAVAILABLE ``UNAVAILABLE``, a full disk RESOURCE_EXHAUSTED
``STORAGE_FULL``, both with ``RetryInfo`` (never UNKNOWN, never INTERNAL); anything else is
INTERNAL. None of them carries the exception's text (it may quote a URL with its credentials).
gRPC's own errors about the call itself (``grpc.aio.BaseError``: the client went away mid-write,
the server is stopping, the call already ended) are left to gRPC, which drops them quietly when
the client is gone: a client that leaves is not an error.
"""

from __future__ import annotations

import logging
from typing import NoReturn

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status

from agentrt.server.core import (
    AgentRtError,
    InvalidRequest,
    LeaseLost,
    NoSuchResource,
    NotAuthenticated,
    NotPermitted,
    OverLimit,
    RequestKeyReused,
    RunStateConflict,
    StaleRevision,
)
from agentrt.server.store import Environmental, environmental

DOMAIN = "runtime.agentrt"
UNAVAILABLE_RETRY_S = 1.0  # a store that is briefly away: a reconnect, a failover
STORAGE_FULL_RETRY_S = 10.0  # a disk that someone has to free
log = logging.getLogger("agentrt.api")

_CODES: list[tuple[type[AgentRtError], grpc.StatusCode]] = [
    (InvalidRequest, grpc.StatusCode.INVALID_ARGUMENT),
    (NoSuchResource, grpc.StatusCode.NOT_FOUND),
    (RequestKeyReused, grpc.StatusCode.ALREADY_EXISTS),
    (RunStateConflict, grpc.StatusCode.FAILED_PRECONDITION),
    (LeaseLost, grpc.StatusCode.ABORTED),
    (StaleRevision, grpc.StatusCode.ABORTED),
    (NotPermitted, grpc.StatusCode.PERMISSION_DENIED),
    (NotAuthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (OverLimit, grpc.StatusCode.RESOURCE_EXHAUSTED),
]


def status_code_for(exc: AgentRtError) -> grpc.StatusCode:
    for kind, code in _CODES:
        if isinstance(exc, kind):
            return code
    return grpc.StatusCode.INTERNAL


def to_status(exc: AgentRtError) -> status_pb2.Status:
    """The google.rpc.Status for a domain error."""
    code = status_code_for(exc)
    details: list[any_pb2.Any] = []
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason=exc.reason, domain=DOMAIN, metadata=exc.metadata))
    details.append(info)
    if isinstance(exc, InvalidRequest):
        bad = any_pb2.Any()
        bad.Pack(
            error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(field=exc.field, description=exc.message)
                ]
            )
        )
        details.append(bad)
    elif isinstance(exc, RunStateConflict | StaleRevision):
        pre = any_pb2.Any()
        pre.Pack(
            error_details_pb2.PreconditionFailure(
                violations=[
                    error_details_pb2.PreconditionFailure.Violation(
                        type=exc.reason, subject=exc.metadata.get("run_id", ""), description=exc.message
                    )
                ]
            )
        )
        details.append(pre)
    elif isinstance(exc, OverLimit) and exc.retry_after_s is not None:
        retry = any_pb2.Any()
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(round(exc.retry_after_s * 1e9))
        retry.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
        details.append(retry)
    return status_pb2.Status(code=code.value[0], message=exc.message, details=details)


async def abort_with(context: grpc.aio.ServicerContext[object, object], exc: AgentRtError) -> NoReturn:
    """Abort the RPC with the error's status and details in the trailers."""
    status = rpc_status.to_status(to_status(exc))
    await context.abort(status.code, status.details, trailing_metadata=status.trailing_metadata)
    raise AssertionError("unreachable: abort raises")


_ENVIRONMENTAL: dict[Environmental, tuple[int, str, str, float]] = {
    Environmental.UNAVAILABLE: (
        code_pb2.UNAVAILABLE,
        "UNAVAILABLE",
        "the service is briefly unavailable; try again",
        UNAVAILABLE_RETRY_S,
    ),
    Environmental.STORAGE_FULL: (
        code_pb2.RESOURCE_EXHAUSTED,
        "STORAGE_FULL",
        "the server's storage is full; try again later",
        STORAGE_FULL_RETRY_S,
    ),
}


def unexpected_status(exc: BaseException) -> status_pb2.Status:
    """The status of an exception no handler expected (not a domain error): see the module doc."""
    kind = environmental(exc)
    if kind is None:
        code, reason, message, retry_after_s = code_pb2.INTERNAL, "INTERNAL", "internal error", None
    else:
        code, reason, message, retry_after_s = _ENVIRONMENTAL[kind]
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN))
    details = [info]
    if retry_after_s is not None:
        retry = any_pb2.Any()
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(round(retry_after_s * 1e9))
        retry.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
        details.append(retry)
    return status_pb2.Status(code=code, message=message, details=details)


async def abort_internal(context: grpc.aio.ServicerContext[object, object], exc: BaseException) -> NoReturn:
    """Abort with the status of an exception no handler expected, logging its cause here only.

    A domain error gets its own status (:func:`abort_with`); gRPC's errors about the call itself
    are raised again for gRPC to handle.

    Raises:
        grpc.aio.BaseError: ``exc`` itself, when it is one.
    """
    if isinstance(exc, grpc.aio.BaseError):
        raise exc
    if isinstance(exc, AgentRtError):
        await abort_with(context, exc)
    kind = environmental(exc)
    if kind is None:
        log.error("unexpected error in handler", exc_info=exc)
    else:  # not a bug: the type only, no traceback (the driver's message may quote a credential)
        log.warning("handler failed on the environment: %s (%s)", type(exc).__name__, kind.value)
    status = rpc_status.to_status(unexpected_status(exc))
    await context.abort(status.code, status.details, trailing_metadata=status.trailing_metadata)
    raise AssertionError("unreachable: abort raises")
