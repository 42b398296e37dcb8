"""The Python clients and the CLI on a run's cleanup tail, against an in-process fake runtime over
real gRPC: a follow stream reads through the tail to cleanup.settled, ``cleanup_tail=False``
stops at the mark after run.ended, and a stream that ends with the tail open says so
(``tail_open``), typed, from the ``run.waiting`` WAIT_REASON_CLEANUP item.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest

from agentrt.client import AsyncClient, Client, cli, event_type
from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2, runtime_service_pb2_grpc

Ctx = grpc.aio.ServicerContext[Any, Any]


def ended(run_id: str) -> list[run_pb2.RunEvent]:
    """A run that completed with one cleanup left UNKNOWN, up to the open-tail mark."""
    mark = run_pb2.RunWaiting(
        reason=run_pb2.WAIT_REASON_CLEANUP, phase=run_pb2.RUN_PHASE_COMPLETED, detail="1"
    )
    return [
        run_pb2.RunEvent(run_id=run_id, seq=1, run_started=run_pb2.RunStarted(agent_name="a")),
        run_pb2.RunEvent(run_id=run_id, seq=2, run_completed=run_pb2.RunCompleted(output="done")),
        run_pb2.RunEvent(run_id=run_id, seq=3, run_ended=run_pb2.RunEnded(phase=run_pb2.RUN_PHASE_COMPLETED)),
        run_pb2.RunEvent(run_id=run_id, seq=0, run_waiting=mark),
    ]


def tail(run_id: str) -> list[run_pb2.RunEvent]:
    """What the cleanup job records later, closed by cleanup.settled."""
    return [
        run_pb2.RunEvent(
            run_id=run_id, seq=4, cleanup_started=run_pb2.CleanupStarted(cleanup_id="c1", attempt=2)
        ),
        run_pb2.RunEvent(
            run_id=run_id, seq=5, cleanup_completed=run_pb2.CleanupCompleted(cleanup_id="c1", attempt=2)
        ),
        run_pb2.RunEvent(run_id=run_id, seq=6, cleanup_settled=run_pb2.CleanupSettled(retries=1)),
    ]


class TailRuntime(runtime_service_pb2_grpc.AgentRuntimeServiceServicer):
    """Serves one ended run whose cleanup tail is open; the job settles it once ``settle`` is set."""

    def __init__(self) -> None:
        self.settle = asyncio.Event()
        self.stream_closed = asyncio.Event()
        self.requests: list[Any] = []

    async def RunAgent(
        self, request: runtime_service_pb2.RunAgentRequest, context: Ctx
    ) -> AsyncIterator[runtime_service_pb2.RunAgentResponse]:
        for e in ended("run-1"):  # the answer, then the mark: RunAgent does not wait for the job
            yield runtime_service_pb2.RunAgentResponse(event=e)

    async def StreamRunEvents(
        self, request: runtime_service_pb2.StreamRunEventsRequest, context: Ctx
    ) -> AsyncIterator[runtime_service_pb2.StreamRunEventsResponse]:
        self.requests.append(request)
        try:
            for e in ended(request.run_id):
                if e.seq > request.after_seq or not e.seq:
                    yield runtime_service_pb2.StreamRunEventsResponse(event=e)
            if request.follow:  # a follow stream goes on with the tail
                await self.settle.wait()
                for e in tail(request.run_id):
                    yield runtime_service_pb2.StreamRunEventsResponse(event=e)
        finally:
            self.stream_closed.set()


@pytest.fixture
async def fake() -> AsyncIterator[tuple[TailRuntime, str]]:
    servicer = TailRuntime()
    server = grpc.aio.server()
    runtime_service_pb2_grpc.add_AgentRuntimeServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        await server.stop(grace=None)


async def test_a_follow_stream_reads_through_the_tail_until_it_settles(fake: tuple[TailRuntime, str]) -> None:
    servicer, target = fake
    async with AsyncClient(target) as client:
        stream = client.stream_events("run-1", follow=True)
        seen = [event_type(await anext(stream)) for _ in range(4)]
        assert seen == ["run.started", "run.completed", "run.ended", "run.waiting"]
        assert stream.tail_open and stream.ended is not None  # the outcome is known, the log is not whole
        servicer.settle.set()  # the cleanup job releases it
        seen += [event_type(e) async for e in stream]
    assert seen[4:] == ["cleanup.started", "cleanup.completed", "cleanup.settled"]
    assert not stream.tail_open and stream.waiting is None
    assert stream.settled is not None and stream.settled.retries == 1 and stream.last_seq == 6


async def test_cleanup_tail_false_stops_at_the_mark_and_says_the_tail_is_open(
    fake: tuple[TailRuntime, str],
) -> None:
    servicer, target = fake
    async with AsyncClient(target) as client:
        stream = client.stream_events("run-1", follow=True, cleanup_tail=False)
        seen = [event_type(e) async for e in stream]  # ends by itself: the server's stream would not
        await asyncio.wait_for(servicer.stream_closed.wait(), 10)  # the client cancelled its call
    assert seen == ["run.started", "run.completed", "run.ended", "run.waiting"]
    assert stream.tail_open and stream.settled is None and stream.last_seq == 3
    assert stream.ended is not None and stream.ended.phase == run_pb2.RUN_PHASE_COMPLETED
    assert servicer.requests[0].follow


async def test_the_sync_client_handles_the_tail_the_same_way(fake: tuple[TailRuntime, str]) -> None:
    servicer, target = fake

    def scenario() -> tuple[list[str], bool, list[str], bool, list[str], bool]:
        with Client(target) as client:
            with client.stream_events("run-1") as replay:  # a replay ends with the mark
                replayed = [event_type(e) for e in replay]
            with client.stream_events("run-1", follow=True, cleanup_tail=False) as stopped:
                stopped_at = [event_type(e) for e in stopped]
            with client.stream_events("run-1", after_seq=3, follow=True) as through:
                servicer_loop.call_soon_threadsafe(servicer.settle.set)
                followed = [event_type(e) for e in through]
            return replayed, replay.tail_open, stopped_at, stopped.tail_open, followed, through.tail_open

    servicer_loop = asyncio.get_running_loop()
    replayed, replay_open, stopped_at, stopped_open, followed, through_open = await asyncio.to_thread(
        scenario
    )
    assert replayed == stopped_at == ["run.started", "run.completed", "run.ended", "run.waiting"]
    assert replay_open and stopped_open
    assert followed == ["run.waiting", "cleanup.started", "cleanup.completed", "cleanup.settled"]
    assert not through_open


async def test_agentrt_run_follow_says_the_cleanup_tail_is_open_and_exits_on_the_outcome(
    fake: tuple[TailRuntime, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, target = fake
    code = await asyncio.to_thread(cli.main, ["--target", target, "run", "a", "hi", "--follow"])
    assert code == 0  # the run completed: a cleanup still retried does not change its outcome
    captured = capsys.readouterr()
    assert captured.out.splitlines()[-1] == '~  run.waiting  CLEANUP phase=COMPLETED detail="1"'
    assert captured.err.strip() == (
        "run run-1 ended; cleanups not released yet: 1 (the server's cleanup job retries them; "
        "agentrt list --cleanup-unknown); follow them with: agentrt events run-1 --after 3 --follow"
    )
