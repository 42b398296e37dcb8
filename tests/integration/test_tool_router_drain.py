"""A tool host's drain refusal as the router reads it: never sent, re-sent within a pool, and the
host's RetryInfo carried to the retry verdict (tests/unit/test_core_attempts.py).

In-process tool hosts whose calls are refused as draining while their health still says SERVING:
the moment between a host's SIGTERM and the pool channel hearing its health change, when the
channel may still pick it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pydantic
import pytest

# googleapis-common-protos ships no type information.
from google.rpc import error_details_pb2  # type: ignore[import-untyped]
from grpc_health.v1.health_pb2 import HealthCheckRequest, HealthCheckResponse
from grpc_health.v1.health_pb2_grpc import HealthStub
from grpc_status import rpc_status

from agentrt.proto.toolhost.v1.tool_host_service_pb2 import InvokeToolRequest
from agentrt.proto.toolhost.v1.tool_host_service_pb2_grpc import ToolHostServiceStub
from agentrt.server.core import ToolErrorCode, tool_hosts
from agentrt.server.tools import CallMetadata, ToolRouter
from agentrt.toolhost import SideEffect, ToolContext, ToolHost, tool

FAST = tool_hosts.RelistPolicy(every_s=30.0, base_s=0.05, cap_s=0.2)


class Args(pydantic.BaseModel):
    n: int = 0


def echo_host(tmp_path: Path, name: str) -> ToolHost:
    @tool(name="drain.echo", description="echo", side_effect=SideEffect.WRITE)
    async def echo(args: Args, ctx: ToolContext) -> dict[str, Any]:
        return {"n": args.n, "host": name}

    return ToolHost(tools={"drain.echo": echo}, data_dir=tmp_path / name)


def meta(key: str) -> CallMetadata:
    return CallMetadata(idempotency_key=key, run_id="run-1", call_id=key, attempt=1, fencing_token=1)


def begin_drain(host: ToolHost, retry_after_s: float) -> None:
    """The host refuses new calls as draining; its health is left SERVING (the race window)."""
    # The drain's first half, without its health flip.
    servicer: Any = host._servicer
    servicer.drain.begin(retry_after_s=retry_after_s)


@pytest.fixture
async def hosts(tmp_path: Path) -> AsyncIterator[tuple[ToolHost, ToolHost, str, str]]:
    first, second = echo_host(tmp_path, "a"), echo_host(tmp_path, "b")
    a, b = await first.start(), await second.start()
    try:
        yield first, second, a, b
    finally:
        await first.stop(grace=None)
        await second.stop(grace=None)


async def pool_router(a: str, b: str) -> ToolRouter:
    router = ToolRouter(connect_s=2.0)
    host = router.open_host("pool", f"ipv4:{a},{b}", pooled=True)
    assert await router.watch_host(host, first_wait_s=5.0, policy=FAST) == ["drain.echo"]
    return router


async def test_a_pool_member_refusing_as_draining_is_passed_by_the_call_runs_once_elsewhere(
    hosts: tuple[ToolHost, ToolHost, str, str],
) -> None:
    first, _, a, b = hosts
    router = await pool_router(a, b)
    try:
        begin_drain(first, retry_after_s=7.0)
        outcomes = [
            await router.invoke("drain.echo", json.dumps({"n": n}), metadata=meta(f"k{n}"), timeout_s=5.0)
            for n in range(8)
        ]
        resends = router.counters.get("tool_drain_resend_count")
    finally:
        await router.close()
    answered = [json.loads(o.result_json or "null") for o in outcomes]
    assert answered == [{"n": n, "host": "b"} for n in range(8)]  # every call, on the member serving
    assert resends >= 1  # round robin picked the draining member at least once


async def test_a_pool_whose_members_all_refuse_gives_a_never_sent_outcome_with_the_hosts_delay(
    hosts: tuple[ToolHost, ToolHost, str, str],
) -> None:
    first, second, a, b = hosts
    router = await pool_router(a, b)
    try:
        begin_drain(first, retry_after_s=7.0)
        begin_drain(second, retry_after_s=7.0)
        outcome = await router.invoke("drain.echo", "{}", metadata=meta("k"), timeout_s=5.0)
        resends = router.counters.get("tool_drain_resend_count")
    finally:
        await router.close()
    assert outcome.code is ToolErrorCode.TRANSIENT and outcome.never_sent and not outcome.in_doubt
    assert outcome.retry_after_s == 7.0
    assert resends == 2  # bounded: then the refusal is the attempt's outcome


async def test_a_lone_draining_host_is_not_asked_again_within_the_attempt(
    hosts: tuple[ToolHost, ToolHost, str, str],
) -> None:
    first, _, a, _ = hosts
    router = ToolRouter(connect_s=2.0)
    try:
        await router.add_host("lone", a)
        begin_drain(first, retry_after_s=1000.0)
        outcome = await router.invoke("drain.echo", "{}", metadata=meta("k"), timeout_s=5.0)
        resends = router.counters.get("tool_drain_resend_count")
    finally:
        await router.close()
    assert outcome.never_sent and resends == 0
    assert outcome.retry_after_s == 60.0  # a host's delay is capped: it cannot park a call for long


async def test_a_host_watched_by_a_pool_keeps_refusing_as_draining_a_moment_before_it_closes(
    tmp_path: Path,
) -> None:
    host = echo_host(tmp_path, "a")
    address = await host.start()
    channel = grpc.aio.insecure_channel(address)
    watch = HealthStub(channel).Watch(HealthCheckRequest(service=""))
    try:
        assert (await watch.read()).status == HealthCheckResponse.SERVING
        stopping = asyncio.ensure_future(host.stop(grace=5.0, linger_s=0.5))
        assert (await watch.read()).status == HealthCheckResponse.NOT_SERVING
        # A call that picked the host before its client heard: the typed refusal, not a reset.
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await ToolHostServiceStub(channel).InvokeTool(
                InvokeToolRequest(tool="drain.echo", arguments_json="{}"),
                metadata=[("x-agentrt-idempotency-key", "late")],
                timeout=5,
            )
        await stopping
    finally:
        watch.cancel()
        await channel.close()
    status = rpc_status.from_call(refused.value)  # type: ignore[arg-type]
    info = error_details_pb2.ErrorInfo()
    assert status is not None and status.details[0].Unpack(info) and info.reason == "DRAINING"


async def test_a_host_nobody_watches_closes_as_soon_as_its_calls_are_done(tmp_path: Path) -> None:
    host = echo_host(tmp_path, "a")
    await host.start()
    began = time.monotonic()
    await host.stop(grace=5.0, linger_s=30.0)
    assert time.monotonic() - began < 10.0  # not the linger: no pool channel would route elsewhere
