"""Tool results past their maximum, at both ends of the hop (R8.4): a real tool host process, the
runtime's router in this process, over loopback gRPC.

The host refuses a result past the call's ``x-agentrt-max-result-bytes`` itself (RESULT_TOO_LARGE,
recorded: a retry under the same key gets the same answer without running again); a malformed
header is refused before the tool runs. A host that does not enforce the maximum still cannot push a
result past the router's channel limit: the router reports RESULT_TOO_LARGE, never a transient
error it would retry.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from agentrt.proto.toolhost.v1 import tool_host_service_pb2 as svc
from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.proto.toolhost.v1.tool_host_service_pb2_grpc import ToolHostServiceStub
from agentrt.server.core import ToolErrorCode
from agentrt.server.tools import CallMetadata, ToolRouter
from agentrt.testing import ToolHostProcess, spawn_tool_host

MiB = 1024 * 1024


@pytest.fixture
def blob_host(tmp_path: Path) -> Iterator[ToolHostProcess]:
    with spawn_tool_host(tmp_path / "toolhost", plugins=["agentrt.plugins.blob_tools"]) as host:
        yield host


def meta(max_result_bytes: int) -> CallMetadata:
    return CallMetadata(
        idempotency_key=uuid.uuid4().hex,
        run_id="r1",
        call_id="c1",
        attempt=1,
        fencing_token=1,
        max_result_bytes=max_result_bytes,
    )


def args(size: int) -> str:
    return json.dumps({"size_bytes": size})


async def test_the_host_refuses_a_result_past_the_calls_maximum_and_records_it(
    blob_host: ToolHostProcess,
) -> None:
    router = ToolRouter(max_result_bytes=4096)
    try:
        await router.add_host("blobs", blob_host.address)
        fits = await router.invoke("blob.make", args(4096 - 11), metadata=meta(4096), timeout_s=10)
        assert fits.error is None and fits.result_json is not None and len(fits.result_json) == 4096

        call = meta(4096)
        refused = await router.invoke("blob.make", args(4096 - 10), metadata=call, timeout_s=10)
        assert refused.error is not None and refused.result_json is None
        assert refused.error.code is ToolErrorCode.RESULT_TOO_LARGE
        assert refused.error.message == "the result is 4097 bytes; the maximum is 4096"
        # Recorded in the ledger: the same key answers the same, from the record.
        again = await router.invoke("blob.make", args(4096 - 10), metadata=call, timeout_s=10)
        assert again.error == refused.error and again.replayed

        huge = await router.invoke("blob.make", args(50 * MiB), metadata=meta(4096), timeout_s=30)
        assert huge.error is not None and huge.error.code is ToolErrorCode.RESULT_TOO_LARGE
        assert huge.error.message == f"the result is {50 * MiB + 11} bytes; the maximum is 4096"
    finally:
        await router.close()


async def test_a_result_past_the_channel_limit_is_result_too_large_not_transient(
    blob_host: ToolHostProcess,
) -> None:
    # No header: the host uses its own default (64 MiB) and sends 3 MiB; the router's channel takes
    # at most 4096 bytes plus its framing allowance (1 MiB).
    router = ToolRouter(max_result_bytes=4096)
    try:
        await router.add_host("blobs", blob_host.address)
        outcome = await router.invoke("blob.make", args(3 * MiB), metadata=meta(0), timeout_s=30)
        assert outcome.error is not None
        assert outcome.code is ToolErrorCode.RESULT_TOO_LARGE and not outcome.in_doubt
    finally:
        await router.close()


@pytest.mark.parametrize("value", ["-1", "abc", "1e9", "9" * 30, "0x10"])
def test_a_malformed_maximum_is_refused_before_the_tool_runs(blob_host: ToolHostProcess, value: str) -> None:
    with grpc.insecure_channel(blob_host.address) as channel:
        stub = ToolHostServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.InvokeTool(
                svc.InvokeToolRequest(tool="blob.make", arguments_json=args(10)),
                metadata=[("x-agentrt-idempotency-key", "k1"), ("x-agentrt-max-result-bytes", value)],
                timeout=10,
            )
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "x-agentrt-max-result-bytes" in (caught.value.details() or "")
        assert len(caught.value.details() or "") < 200
        # Nothing was recorded: the same key with a good header runs the tool.
        reply = stub.InvokeTool(
            svc.InvokeToolRequest(tool="blob.make", arguments_json=args(10)),
            metadata=[("x-agentrt-idempotency-key", "k1"), ("x-agentrt-max-result-bytes", "1000")],
            timeout=10,
        )
        assert reply.WhichOneof("outcome") == "result_json" and not reply.replayed
        assert tool_pb2.TOOL_ERROR_CODE_RESULT_TOO_LARGE == 10
