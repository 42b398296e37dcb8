"""The engine's real components behind the step executors' ports (``_ports``)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

import grpc

from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.server.core import LedgerWord
from agentrt.server.models import ModelRegistry, ModelRequest, ModelResponse, ModelSpecData
from agentrt.server.tools import CallMetadata, ToolHostUnreachable, ToolOutcome, ToolRouter

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

    async def wait_for_spec(self, tool: str, timeout_s: float) -> bool:
        await self.router.routes.wait_for(tool, timeout_s)
        return tool not in self.router.pending_tools()

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
    ) -> LedgerWord:
        return await self.router.query(tool, arguments_json, metadata=metadata, timeout_s=timeout_s)

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
        except ToolHostUnreachable as exc:
            log.warning(
                "could not ask the tool host to cancel %s (key %s): %s", tool, metadata.idempotency_key, exc
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
