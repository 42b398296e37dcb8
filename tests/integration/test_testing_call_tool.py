"""agentrt.testing.call_tool against a real tool host: what a plugin author's tests rely on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from agentrt.testing import ToolHostProcess, call_tool, spawn_tool_host


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolHostProcess]:
    data_dir: Path = tmp_path_factory.mktemp("host")
    with spawn_tool_host(data_dir, plugins=["agentrt.plugins.demo_tools"]) as host:
        yield host


def test_a_call_returns_the_tools_result(host: ToolHostProcess) -> None:
    reply = host.call_tool("noop.echo", {"text": "hi"})
    assert reply.ok and reply.result == {"text": "hi"} and not reply.replayed


def test_the_same_key_again_is_replayed_from_the_ledger(host: ToolHostProcess) -> None:
    refund = {"order_id": "A100", "amount": 1, "reason": "late"}
    first = call_tool(host.address, "refund.issue", refund, idempotency_key="k-1")
    again = call_tool(host.address, "refund.issue", refund, idempotency_key="k-1")
    assert first.ok and not first.replayed
    assert again.replayed and again.result == first.result


def test_a_typed_failure_comes_back_as_its_code(host: ToolHostProcess) -> None:
    reply = host.call_tool("orders.lookup", {})
    assert reply.error_code == "INVALID_INPUT" and reply.result is None and reply.error_message


def test_a_tool_the_host_does_not_have_is_a_typed_failure(host: ToolHostProcess) -> None:
    assert host.call_tool("no.such_tool", {}).error_code == "UNKNOWN_TOOL"


def test_a_host_that_is_not_there_raises_the_rpc_error() -> None:
    with pytest.raises(grpc.RpcError) as refused:
        call_tool("127.0.0.1:1", "noop.echo", {"text": "hi"}, timeout_s=5)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
