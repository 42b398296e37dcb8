"""The engine's real components behind the step executors' ports (``_ports``)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

import grpc
from google.protobuf import json_format

from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.server.engine._ports import LedgerAnswer
from agentrt.server.models import ModelRegistry, ModelRequest, ModelResponse, ModelSpecData
from agentrt.server.tools import CallMetadata, ToolOutcome, ToolRouter, host_unsure

__all__ = ["RegistryModels", "RouterTools"]

log = logging.getLogger("agentrt.engine")


class RouterTools:
    """The tool router as a :class:`ToolPort`: the ledger's answers become outcomes, not RPC errors."""

    def __init__(self, router: ToolRouter):
        self.router = router

    def spec(self, tool: str) -> tool_pb2.ToolSpec | None:
        return self.router.spec(tool)

    def host_of(self, tool: str) -> str:
        return self.router.host_of(tool)

    async def invoke(
        self, tool: str, arguments_json: str, *, metadata: CallMetadata, timeout_s: float
    ) -> ToolOutcome:
        outcome = await self.router.invoke(tool, arguments_json, metadata=metadata, timeout_s=timeout_s)
        return dataclasses.replace(outcome, host=self.router.host_of(tool))

    async def preview(
        self, tool: str, arguments_json: str, *, metadata: CallMetadata, timeout_s: float
    ) -> str:
        return await self.router.preview(tool, arguments_json, metadata=metadata, timeout_s=timeout_s)

    async def query(
        self, tool: str, arguments_json: str, *, metadata: CallMetadata, timeout_s: float
    ) -> LedgerAnswer:
        try:
            operation = await self.router.get_operation(
                tool, arguments_json, metadata=metadata, timeout_s=timeout_s
            )
        except grpc.aio.AioRpcError:
            return "unknown"  # unreachable, deadline, refused: nobody can tell yet
        if operation is None:
            return "not_found"
        host = self.router.host_of(tool)
        if operation.status == tool_pb2.OPERATION_STATUS_SUCCEEDED:
            return ToolOutcome(operation.result_json, None, True, host=host)
        if operation.status == tool_pb2.OPERATION_STATUS_FAILED:
            error = json_format.MessageToDict(operation.error, preserving_proto_field_name=True)
            # "Stopped where it stood" is recorded, but says nothing about the effect.
            return ToolOutcome(None, error, in_doubt=host_unsure(operation.error), host=host)
        return "unknown"

    async def cancel(
        self, tool: str, arguments_json: str, *, metadata: CallMetadata, reason: str, timeout_s: float
    ) -> bool:
        try:
            return await self.router.cancel_operation(
                tool, arguments_json, metadata=metadata, reason=reason, timeout_s=timeout_s
            )
        except grpc.aio.AioRpcError as exc:
            # Best effort: the call's own answer, or the ledger later, still says what happened.
            log.warning(
                "could not ask the tool host to cancel %s (key %s): %s %s",
                tool,
                metadata.idempotency_key,
                exc.code().name,
                exc.details(),
            )
            return False


class RegistryModels:
    """The model registry as a :class:`ModelPort`."""

    def __init__(self, registry: ModelRegistry):
        self.registry = registry

    def check(self, spec: ModelSpecData) -> None:
        self.registry.provider(spec)

    async def complete(
        self, spec: ModelSpecData, request: ModelRequest, *, on_text_delta: Callable[[str], None]
    ) -> ModelResponse:
        # The lease keeps the provider open for this call even if the bounded cache evicts it.
        with self.registry.lease(spec) as provider:
            return await provider.complete(request, on_text_delta=on_text_delta)
