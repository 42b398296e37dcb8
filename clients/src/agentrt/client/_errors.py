"""Errors raised by the agentrt client.

Every failed call raises an :class:`RPCError` carrying the gRPC status code, the
message and the ``google.rpc`` details the runtime sent (DESIGN R3.5). Catch
``RPCError`` and look at ``.code`` / ``.reason``, or catch a subclass by code.

Error tree::

    ClientError
     ├── CredentialsError             TLS files or token unusable (raised when a client is made)
     └── RPCError                     any non-OK gRPC status
          ├── InvalidArgumentError    INVALID_ARGUMENT (see BadRequest in .details)
          ├── NotFoundError           NOT_FOUND
          ├── AlreadyExistsError      ALREADY_EXISTS
          ├── FailedPreconditionError FAILED_PRECONDITION (see PreconditionFailure)
          ├── AbortedError            ABORTED (a concurrent change won; re-read and retry)
          ├── ResourceExhaustedError  RESOURCE_EXHAUSTED (see RetryInfo)
          ├── DeadlineExceededError   DEADLINE_EXCEEDED
          ├── UnavailableError        UNAVAILABLE (server down or unreachable)
          ├── PermissionDeniedError   PERMISSION_DENIED
          └── UnauthenticatedError    UNAUTHENTICATED
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import grpc
import grpc.aio
from google.protobuf import any_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status

_M = TypeVar("_M", bound=Message)

Hint = Callable[[grpc.StatusCode, str], str]
"""Given a failed call's code and message, a client-side hint of what to check ("" for none)."""

# Detail types decoded from google.rpc.Status.details; anything else is kept as the packed Any.
_DETAIL_TYPES: tuple[type[Message], ...] = (
    error_details_pb2.ErrorInfo,
    error_details_pb2.BadRequest,
    error_details_pb2.PreconditionFailure,
    error_details_pb2.RetryInfo,
    error_details_pb2.QuotaFailure,
    error_details_pb2.ResourceInfo,
    error_details_pb2.RequestInfo,
    error_details_pb2.DebugInfo,
    error_details_pb2.Help,
    error_details_pb2.LocalizedMessage,
)


class ClientError(Exception):
    """Base class of every error the agentrt client raises."""


class CredentialsError(ClientError):
    """The client's TLS files or token cannot be used.

    Raised when a client is made: a file is missing, unreadable or not PEM, a certificate
    comes without its key, options conflict, or a token would travel in clear to a
    non-loopback target. The message names the file or option, never the token.
    """


class RPCError(ClientError):
    """A call to the runtime ended with a non-OK gRPC status.

    The ``google.rpc.Status`` from the trailing metadata is kept as is; its
    details are decoded on first access.

    Args:
        code: The gRPC status code.
        message: The status message.
        grpc_status: The rich status the server attached, if any.
        hint: What the client suggests checking (e.g. a TLS option), "" for nothing.
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        *,
        grpc_status: status_pb2.Status | None = None,
        hint: str = "",
    ) -> None:
        super().__init__(f"{code.name}: {message}" + (f" (hint: {hint})" if hint else ""))
        self.code = code
        self.message = message
        self.grpc_status = grpc_status
        self.hint = hint

    @property
    def status(self) -> grpc.StatusCode:
        """The gRPC status code (same as ``code``)."""
        return self.code

    @functools.cached_property
    def details(self) -> list[Message]:
        """The status details, decoded: ErrorInfo, BadRequest, PreconditionFailure, RetryInfo, ...

        A detail of a type this client does not know stays a ``google.protobuf.Any``.
        """
        if self.grpc_status is None:
            return []
        decoded: list[Message] = []
        for packed in self.grpc_status.details:
            decoded.append(_unpack(packed))
        return decoded

    def detail(self, kind: type[_M]) -> _M | None:
        """Returns the first detail of type ``kind``, or None.

        Args:
            kind: A detail message class, e.g. ``error_details_pb2.BadRequest``.

        Returns:
            The detail, or None when the status carries none of that type.
        """
        for d in self.details:
            if isinstance(d, kind):
                return d
        return None

    @property
    def error_info(self) -> error_details_pb2.ErrorInfo | None:
        """The ErrorInfo detail, or None."""
        return self.detail(error_details_pb2.ErrorInfo)

    @property
    def reason(self) -> str:
        """The stable ``ErrorInfo.reason`` (e.g. ``RUN_NOT_FOUND``), "" when absent."""
        info = self.error_info
        return info.reason if info is not None else ""

    @property
    def domain(self) -> str:
        """The ``ErrorInfo.domain``, "" when absent."""
        info = self.error_info
        return info.domain if info is not None else ""

    @property
    def metadata(self) -> dict[str, str]:
        """The ``ErrorInfo.metadata``, empty when absent."""
        info = self.error_info
        return dict(info.metadata) if info is not None else {}


class InvalidArgumentError(RPCError):
    """INVALID_ARGUMENT: the request is malformed; field violations are in a BadRequest detail."""


class NotFoundError(RPCError):
    """NOT_FOUND: the run (or agent, approval) does not exist."""


class AlreadyExistsError(RPCError):
    """ALREADY_EXISTS: the thing to create exists already."""


class FailedPreconditionError(RPCError):
    """FAILED_PRECONDITION: the run is not in a state that allows the call."""


class AbortedError(RPCError):
    """ABORTED: a concurrent change won (e.g. a stale ``expected_revision``); re-read and retry."""


class ResourceExhaustedError(RPCError):
    """RESOURCE_EXHAUSTED: a limit or quota was hit; a RetryInfo detail may say when to retry."""


class DeadlineExceededError(RPCError):
    """DEADLINE_EXCEEDED: the call's timeout passed."""


class UnavailableError(RPCError):
    """UNAVAILABLE: the server is down, unreachable or shutting down."""


class PermissionDeniedError(RPCError):
    """PERMISSION_DENIED: the caller may not do this."""


class UnauthenticatedError(RPCError):
    """UNAUTHENTICATED: the caller's credentials are missing or invalid."""


_BY_CODE: dict[grpc.StatusCode, type[RPCError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.ABORTED: AbortedError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
}


def make_rpc_error(
    code: grpc.StatusCode,
    message: str,
    grpc_status: status_pb2.Status | None = None,
    *,
    hint: Hint | None = None,
) -> RPCError:
    """Builds the RPCError subclass that matches ``code``; ``hint`` may add advice to it."""
    advice = hint(code, message) if hint is not None else ""
    return _BY_CODE.get(code, RPCError)(code, message, grpc_status=grpc_status, hint=advice)


def from_call(exc: grpc.RpcError, *, hint: Hint | None = None) -> RPCError:
    """Converts the error of a synchronous call (which is also its ``grpc.Call``)."""
    if not isinstance(exc, grpc.Call):
        # Only raised by misbehaving interceptors; there is no status to read.
        return RPCError(grpc.StatusCode.UNKNOWN, str(exc))
    status: status_pb2.Status | None
    try:
        status = rpc_status.from_call(exc)
    except ValueError:
        # The rich status contradicts the call's code or message: trust neither its details.
        status = None
    return make_rpc_error(exc.code(), exc.details() or "", status, hint=hint)


async def from_aio_call(
    call: grpc.aio.Call, exc: grpc.aio.AioRpcError, *, hint: Hint | None = None
) -> RPCError:
    """Converts the error of a finished asyncio call."""
    status: status_pb2.Status | None
    try:
        # grpc-stubs lacks rpc_status.aio (grpc_status/_async.py); it exists at run time.
        status = await rpc_status.aio.from_call(call)  # type: ignore[attr-defined]
    except ValueError:
        status = None
    return make_rpc_error(exc.code(), exc.details() or "", status, hint=hint)


def _unpack(packed: any_pb2.Any) -> Message:
    for kind in _DETAIL_TYPES:
        if packed.TypeName() == kind.DESCRIPTOR.full_name:
            msg = kind()
            packed.Unpack(msg)
            return msg
    return packed
