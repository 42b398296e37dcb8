"""The one place domain errors become gRPC statuses with google.rpc details (R3.5).

Every status carries ``ErrorInfo{reason, domain, metadata}``; invalid input adds
``BadRequest`` field violations, state conflicts add ``PreconditionFailure``, a limit reached adds
``RetryInfo``.
Unexpected exceptions become INTERNAL with no internals leaked.
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

DOMAIN = "runtime.agentrt"
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


async def abort_internal(context: grpc.aio.ServicerContext[object, object], exc: BaseException) -> NoReturn:
    """Abort with INTERNAL, logging the real cause here and sending none of it."""
    log.error("unexpected error in handler", exc_info=exc)
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason="INTERNAL", domain=DOMAIN))
    status = rpc_status.to_status(
        status_pb2.Status(code=code_pb2.INTERNAL, message="internal error", details=[info])
    )
    await context.abort(status.code, status.details, trailing_metadata=status.trailing_metadata)
    raise AssertionError("unreachable: abort raises")
