"""Over a real gRPC server in this process (so that its log records can be read): a store that is
briefly away answers UNAVAILABLE with RetryInfo, never UNKNOWN; and clients that cancel their follow
streams leave no ERROR in the server's log and no subscription behind."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import psycopg
import pytest
from google.rpc import error_details_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status

from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2, runtime_service_pb2_grpc
from agentrt.server.api._server import RuntimeServer
from agentrt.server.config import load_settings
from agentrt.testing import ToolHostProcess

NAP = {"text": "sleeping", "tool_calls": [{"tool": "sleep.wait", "arguments": {"seconds": 30}}]}


def _settings(tmp_path: Path, db_url: str, tool_host: str = "") -> dict[str, Any]:
    agents: dict[str, Any] = {
        "quick": {"model": {"provider": "scripted", "options": {"steps": [{"text": "done"}]}}},
    }
    hosts = []
    if tool_host:
        hosts = [{"name": "local", "address": tool_host}]
        agents["sleeper"] = {
            "tools": ["sleep.wait"],
            "model": {"provider": "scripted", "options": {"steps": [NAP, {"text": "woke"}]}},
        }
    return {
        "db_url": db_url,
        "listen": "127.0.0.1:0",
        "data_dir": str(tmp_path / "data"),
        "tool_hosts": hosts,
        "agents": agents,
        # Nothing in the background touches the store while a test looks at one RPC.
        "poll_interval_s": 60.0,
        "lease_ttl_s": 60.0,
    }


def _terminate_backends(database_url: str) -> int:
    name = database_url.rsplit("/", 1)[1].split("?", 1)[0]
    with psycopg.connect(database_url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        ).fetchall()
    return len(rows)


@pytest.mark.postgres
async def test_a_get_run_while_the_database_drops_its_connections_is_unavailable_with_retry_info(
    tmp_path: Path, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = _settings(tmp_path, pg_url)
    server = RuntimeServer(load_settings(env={}, base=config))
    address = await server.start()
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channel)
            run = (
                await stub.StartRun(runtime_service_pb2.StartRunRequest(agent_name="quick", input="hi"))
            ).run
            request = runtime_service_pb2.GetRunRequest(run_id=run.run_id)
            for _ in range(100):  # the run ends at once; wait for it so nothing else uses the store
                if (await stub.GetRun(request, timeout=5)).run.phase == run_pb2.RUN_PHASE_COMPLETED:
                    break
                await asyncio.sleep(0.05)
            assert _terminate_backends(pg_url) >= 1  # every pooled connection is now dead

            with caplog.at_level(logging.WARNING, logger="agentrt"):
                call = stub.GetRun(request, timeout=5)
                with pytest.raises(grpc.aio.AioRpcError) as failed:
                    await call
            assert failed.value.code() == grpc.StatusCode.UNAVAILABLE  # not UNKNOWN, not INTERNAL
            status = await rpc_status.aio.from_call(call)
            assert status is not None
            info, retry = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
            assert status.details[0].Unpack(info) and info.reason == "UNAVAILABLE"
            assert status.details[1].Unpack(retry) and retry.retry_delay.ToTimedelta().total_seconds() > 0
            assert "OperationalError" not in (failed.value.details() or "")
            assert not [r for r in caplog.records if r.levelno >= logging.ERROR]

            # The pool reconnects: the next GetRun answers.
            again = await stub.GetRun(request, timeout=5)
            assert again.run.phase == run_pb2.RUN_PHASE_COMPLETED
    finally:
        await server.stop()


STREAMS = 40


async def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    for _ in range(int(timeout_s / 0.02)):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not within {timeout_s}s")


async def test_cancelling_many_stuck_follow_streams_logs_no_error(
    tmp_path: Path, refund_host: ToolHostProcess, sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = RuntimeServer(load_settings(env={}, base=_settings(tmp_path, sqlite_url, refund_host.address)))
    address = await server.start()
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channel)
            start = runtime_service_pb2.StartRunRequest(agent_name="sleeper", input="nap")
            run = (await stub.StartRun(start)).run
            follow = runtime_service_pb2.StreamRunEventsRequest(run_id=run.run_id, follow=True)
            calls = [stub.StreamRunEvents(follow) for _ in range(STREAMS)]
            # Some readers take what the run wrote so far, then wait with the run; the rest never read.
            for call in calls[: STREAMS // 2]:
                await call.read()
            bus = server.bus
            await _until(lambda: bus.subscriber_count(run.run_id) == STREAMS)

            with caplog.at_level(logging.DEBUG):
                for call in calls:
                    call.cancel()
                # Every handler saw its client go, and let go of the run.
                await _until(lambda: bus.subscriber_count(run.run_id) == 0)
            assert all(call.cancelled() for call in calls)
            errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
            assert not errors, [(r.name, r.getMessage()) for r in errors]
            # The run itself goes on: a stream's end is not the run's.
            got = await stub.GetRun(runtime_service_pb2.GetRunRequest(run_id=run.run_id))
            assert got.run.phase == run_pb2.RUN_PHASE_TOOL_STEP
    finally:
        await server.stop()
