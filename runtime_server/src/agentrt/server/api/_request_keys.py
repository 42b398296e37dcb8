"""The canonical hash of a start request, stored with its request key (DESIGN R8.2).

A request key names one request. A retry (same key, same request) gets the run the first call
started; the same key with a different request is refused with ALREADY_EXISTS
``REQUEST_KEY_REUSED`` rather than silently answered with another request's run.

What the caller asked for is hashed, not what it resolved to: the agent by name (or the inline
spec), the input, the session, the budgets and the metadata. A configured agent edited between
a call and its retry therefore does not break the retry. The session policy is not part of it:
it says how to queue the run, not what the run is. RunAgent and StartRun hash alike, so either
may retry the other.
"""

from __future__ import annotations

import hashlib

from google.protobuf import json_format

from agentrt.proto.runtime.v1 import runtime_service_pb2
from agentrt.toolhost import canonical_json

__all__ = ["request_hash"]


def request_hash(
    request: runtime_service_pb2.RunAgentRequest | runtime_service_pb2.StartRunRequest,
) -> str:
    """sha256 (hex) of the request's canonical JSON; equal for equal requests, however encoded."""
    fields = {
        "agent_name": request.agent_name,
        "agent": (
            json_format.MessageToDict(request.agent, preserving_proto_field_name=True)
            if request.HasField("agent")
            else None
        ),
        "input": request.input,
        "session_id": request.session_id,
        "budgets": json_format.MessageToDict(request.budgets, preserving_proto_field_name=True),
        "metadata": dict(request.metadata),
    }
    return hashlib.sha256(canonical_json(fields).encode()).hexdigest()
