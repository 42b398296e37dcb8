"""gRPC API: servicer, error mapping, conversions, the server process."""

from __future__ import annotations

from agentrt.server.api._errors import abort_with, status_code_for, to_status
from agentrt.server.api._server import READY_PREFIX, SERVICE_NAME, RuntimeServer, serve
from agentrt.server.api._servicer import RuntimeServicer

__all__ = [
    "READY_PREFIX",
    "SERVICE_NAME",
    "RuntimeServer",
    "RuntimeServicer",
    "abort_with",
    "serve",
    "status_code_for",
    "to_status",
]
