"""GetPayload: a run's payload in chunks, tenant-scoped (R8.4)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2
from agentrt.server.core import NoSuchResource
from agentrt.server.store import PayloadStore, StoredPayload

__all__ = ["find_payload", "payload_responses"]


async def find_payload(
    payloads: PayloadStore, request: runtime_service_pb2.GetPayloadRequest, *, tenant_id: str
) -> StoredPayload:
    """The caller's tenant's payload.

    Raises:
        InvalidRequest: A malformed run or payload id (checked before any lookup).
        NoSuchResource: No such payload in this tenant (``PAYLOAD_NOT_FOUND``).
    """
    stored = await payloads.find(run_id=request.run_id, payload_id=request.payload_id, tenant_id=tenant_id)
    if stored is None:
        # The ids are validated above, so they are short and safe to name.
        raise NoSuchResource(
            f"run {request.run_id} has no payload {request.payload_id}",
            reason="PAYLOAD_NOT_FOUND",
            metadata={"run_id": request.run_id, "payload_id": request.payload_id},
        )
    return stored


async def payload_responses(
    payloads: PayloadStore, stored: StoredPayload, *, chunk_bytes: int
) -> AsyncIterator[runtime_service_pb2.GetPayloadResponse]:
    """Chunks of the payload; the first carries its reference (an empty payload is one empty chunk)."""
    ref = stored.ref
    first = run_pb2.PayloadRef(
        payload_id=ref.payload_id, size_bytes=ref.size_bytes, sha256=ref.sha256, media_type=ref.media_type
    )
    offset = 0
    sent = False
    async for part in payloads.chunks(stored, chunk_bytes=chunk_bytes):
        response = runtime_service_pb2.GetPayloadResponse(offset=offset, data=part)
        if not sent:
            response.ref.CopyFrom(first)
            sent = True
        offset += len(part)
        yield response
    if not sent:
        yield runtime_service_pb2.GetPayloadResponse(ref=first, offset=0)
