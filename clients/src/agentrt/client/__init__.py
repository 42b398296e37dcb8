"""Python client library of the agentrt runtime, and the ``agentrt`` CLI (``agentrt.client.cli``).

Use :class:`AsyncClient` from asyncio code and :class:`Client` elsewhere; both talk
to ``agentrt.runtime.v1.AgentRuntimeService`` and raise :class:`RPCError` (with the
server's ``google.rpc`` details decoded) when a call fails.
"""

from __future__ import annotations

import os as _os

# gRPC's C core (>= 1.65) logs INFO lines through absl unless GRPC_VERBOSITY is set, and reads it
# once, at `import grpc`: restore its documented ERROR default before anything imports grpc, so
# stderr stays ours (JSON lines under --log-format json). A GRPC_VERBOSITY of the user's wins.
_os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from agentrt.client._client import (
    DEFAULT_TARGET,
    DEFAULT_TIMEOUT,
    AsyncClient,
    default_target,
)
from agentrt.client._diagnostics import diagnostics_to_json, format_diagnostics
from agentrt.client._errors import (
    AbortedError,
    AlreadyExistsError,
    ClientError,
    CredentialsError,
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    RPCError,
    UnauthenticatedError,
    UnavailableError,
)
from agentrt.client._format import (
    event_to_json,
    event_type,
    format_event,
    format_run,
    format_run_line,
    phase_name,
    run_to_json,
)
from agentrt.client._payloads import Payload, PayloadMismatch
from agentrt.client._streams import AsyncEventStream, EventStream
from agentrt.client._sync_client import Client

__all__ = [
    "DEFAULT_TARGET",
    "DEFAULT_TIMEOUT",
    "AbortedError",
    "AlreadyExistsError",
    "AsyncClient",
    "AsyncEventStream",
    "Client",
    "ClientError",
    "CredentialsError",
    "DeadlineExceededError",
    "EventStream",
    "FailedPreconditionError",
    "InvalidArgumentError",
    "NotFoundError",
    "Payload",
    "PayloadMismatch",
    "PermissionDeniedError",
    "RPCError",
    "ResourceExhaustedError",
    "UnauthenticatedError",
    "UnavailableError",
    "default_target",
    "diagnostics_to_json",
    "event_to_json",
    "event_type",
    "format_diagnostics",
    "format_event",
    "format_run",
    "format_run_line",
    "phase_name",
    "run_to_json",
]
