"""Payloads fetched with GetPayload: the chunks put back together and checked against their hash."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterable, Iterable
from dataclasses import dataclass

from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2

__all__ = ["Payload", "PayloadMismatch", "assemble", "assemble_async"]


class PayloadMismatch(ValueError):
    """The bytes received do not match the payload's size or sha256."""


@dataclass(frozen=True, slots=True)
class Payload:
    """A whole payload: its reference (size, sha256, media type) and its bytes."""

    ref: run_pb2.PayloadRef
    data: bytes

    def text(self) -> str:
        """The payload as text (payloads are JSON or UTF-8 text)."""
        return self.data.decode()


class _Assembler:
    def __init__(self) -> None:
        self.ref: run_pb2.PayloadRef | None = None
        self.parts: list[bytes] = []
        self.size = 0
        self.digest = hashlib.sha256()

    def add(self, response: runtime_service_pb2.GetPayloadResponse) -> None:
        if self.ref is None:
            self.ref = response.ref
        if response.offset != self.size:
            raise PayloadMismatch(f"chunk at offset {response.offset}, expected {self.size}")
        self.parts.append(response.data)
        self.size += len(response.data)
        self.digest.update(response.data)

    def done(self) -> Payload:
        ref = self.ref
        if ref is None:
            raise PayloadMismatch("the stream ended without a chunk")
        if self.size != ref.size_bytes or self.digest.hexdigest() != ref.sha256:
            raise PayloadMismatch(
                f"received {self.size} bytes that do not match the payload's size {ref.size_bytes} and sha256"
            )
        data = b"".join(self.parts)
        self.parts.clear()
        return Payload(ref=ref, data=data)


def assemble(responses: Iterable[runtime_service_pb2.GetPayloadResponse]) -> Payload:
    """The payload from a GetPayload stream; raises PayloadMismatch when it does not add up."""
    assembler = _Assembler()
    for response in responses:
        assembler.add(response)
    return assembler.done()


async def assemble_async(responses: AsyncIterable[runtime_service_pb2.GetPayloadResponse]) -> Payload:
    """:func:`assemble` for a stream of the asyncio client."""
    assembler = _Assembler()
    async for response in responses:
        assembler.add(response)
    return assembler.done()
