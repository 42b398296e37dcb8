"""The two clients share one constructor (``_base.BaseClient``): the same options make the same
channel security, the same call metadata and the same refusals, whichever client is built."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest

from agentrt.client import AsyncClient, Client, CredentialsError
from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2, runtime_service_pb2_grpc

TOKEN = "base-client-token-1234"


class Recording(runtime_service_pb2_grpc.AgentRuntimeServiceServicer):
    def __init__(self) -> None:
        self.metadata: list[dict[str, str]] = []

    async def GetRun(
        self, request: runtime_service_pb2.GetRunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> runtime_service_pb2.GetRunResponse:
        self.metadata.append({k: v for k, v in context.invocation_metadata() or () if isinstance(v, str)})
        return runtime_service_pb2.GetRunResponse(run=run_pb2.Run(run_id=request.run_id))


@pytest.fixture
async def served() -> AsyncIterator[tuple[Recording, str]]:
    servicer = Recording()
    server = grpc.aio.server()
    runtime_service_pb2_grpc.add_AgentRuntimeServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        await server.stop(grace=None)


async def test_both_clients_send_the_same_metadata_from_the_same_options(
    served: tuple[Recording, str],
) -> None:
    servicer, target = served
    options: dict[str, Any] = {"token": TOKEN, "metadata": [("X-Tenant", "t1")], "ca_file": "", "tls": False}

    async with AsyncClient(target, **options) as async_client:
        assert (await async_client.get_run("r-async")).run_id == "r-async"
    with Client(target, **options) as sync_client:
        # The sync client blocks: run it off the loop that serves it.
        assert (await asyncio.to_thread(sync_client.get_run, "r-sync")).run_id == "r-sync"

    sent_async, sent_sync = (
        {k: v for k, v in md.items() if k in ("authorization", "x-tenant")} for md in servicer.metadata
    )
    assert sent_async == sent_sync == {"authorization": f"Bearer {TOKEN}", "x-tenant": "t1"}
    assert repr(async_client).removeprefix("Async") == repr(sync_client)
    assert TOKEN not in repr(async_client) and TOKEN not in repr(sync_client)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"token": TOKEN, "metadata": [("Authorization", "Bearer other")]}, "not both"),
        ({"token": TOKEN, "ca_file": "", "tls": False, "target": "10.1.2.3:1"}, "in clear"),
    ],
)
def test_both_clients_refuse_the_same_options(options: dict[str, Any], message: str) -> None:
    target = options.pop("target", "127.0.0.1:1")
    for client_class in (Client, AsyncClient):
        with pytest.raises(CredentialsError, match=message):
            client_class(target, **options)


async def test_a_ready_channel_is_neither_secured_again_nor_closed_by_either_client(
    served: tuple[Recording, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    servicer, target = served
    monkeypatch.setenv("AGENTRT_TOKEN", TOKEN)  # would apply to a channel the client made
    async with grpc.aio.insecure_channel(target) as channel:
        async with AsyncClient(channel=channel) as client:
            await client.get_run("r1")
        stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channel)
        await stub.GetRun(runtime_service_pb2.GetRunRequest(run_id="r2"), timeout=5)  # still open
    with grpc.insecure_channel(target) as sync_channel:
        with Client(channel=sync_channel) as sync_client:
            await asyncio.to_thread(sync_client.get_run, "r3")
        sync_stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(sync_channel)
        await asyncio.to_thread(sync_stub.GetRun, runtime_service_pb2.GetRunRequest(run_id="r4"), timeout=5)
    assert len(servicer.metadata) == 4
    assert not [md for md in servicer.metadata if "authorization" in md]
