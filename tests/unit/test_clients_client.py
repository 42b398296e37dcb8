"""AsyncClient and Client against an in-process fake AgentRuntimeService (real gRPC on loopback)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

import agentrt.client as clients
from agentrt.client import AsyncClient, Client, RPCError
from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2, runtime_service_pb2_grpc

RUN_ID = "run-1"


def canned_events(run_id: str = RUN_ID) -> list[run_pb2.RunEvent]:
    return [
        run_pb2.RunEvent(run_id=run_id, seq=1, run_started=run_pb2.RunStarted(agent_name="refund-demo")),
        run_pb2.RunEvent(run_id=run_id, seq=0, model_text_delta=run_pb2.ModelTextDelta(step=1, text="Look")),
        run_pb2.RunEvent(
            run_id=run_id,
            seq=2,
            model_completed=run_pb2.ModelCompleted(
                step=1,
                tool_calls=[
                    run_pb2.ToolCall(call_id="c1", tool="orders.lookup", arguments_json='{"id":"A1"}')
                ],
            ),
        ),
        run_pb2.RunEvent(run_id=run_id, seq=3, run_completed=run_pb2.RunCompleted(output="done")),
        run_pb2.RunEvent(
            run_id=run_id, seq=4, run_ended=run_pb2.RunEnded(phase=run_pb2.RUN_PHASE_COMPLETED, reason="ok")
        ),
    ]


def make_run(run_id: str = RUN_ID, **fields: Any) -> run_pb2.Run:
    fields.setdefault("phase", run_pb2.RUN_PHASE_QUEUED)
    return run_pb2.Run(run_id=run_id, agent_name="refund-demo", **fields)


def rich_status(code: grpc.StatusCode, message: str, *details: Any) -> grpc.Status:
    packed = []
    for d in details:
        a = any_pb2.Any()
        a.Pack(d)
        packed.append(a)
    st = status_pb2.Status(code=code.value[0], message=message, details=packed)
    return rpc_status.to_status(st)


async def abort_rich(
    context: grpc.aio.ServicerContext[Any, Any], code: grpc.StatusCode, message: str, *details: Any
) -> None:
    # The async ServicerContext lacks abort_with_status (STYLE §4): pass the trailers to abort.
    st = rich_status(code, message, *details)
    await context.abort(st.code, st.details, trailing_metadata=st.trailing_metadata)


BAD_INPUT = (
    error_details_pb2.ErrorInfo(reason="INPUT_EMPTY", domain="runtime.agentrt", metadata={"field": "input"}),
    error_details_pb2.BadRequest(
        field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field="input", description="must not be empty")
        ]
    ),
)


class FakeRuntime(runtime_service_pb2_grpc.AgentRuntimeServiceServicer):
    """Canned answers; records what it was sent. Special names trigger error paths."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.time_remaining: list[float | None] = []
        self.invocation_metadata: list[dict[str, str]] = []
        self.stream_closed = asyncio.Event()

    def _record(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        self.requests.append(request)
        self.time_remaining.append(context.time_remaining())
        self.invocation_metadata.append(
            {k: v for k, v in context.invocation_metadata() or () if isinstance(v, str)}
        )

    async def RunAgent(
        self, request: runtime_service_pb2.RunAgentRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[runtime_service_pb2.RunAgentResponse]:
        self._record(request, context)
        events = canned_events()
        if request.agent_name == "dies-mid-stream":
            for e in events[:2]:
                yield runtime_service_pb2.RunAgentResponse(event=e)
            info = error_details_pb2.ErrorInfo(reason="WORKER_LOST", domain="runtime.agentrt")
            retry = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=2))
            await abort_rich(context, grpc.StatusCode.UNAVAILABLE, "worker lost", info, retry)
        for e in events:
            yield runtime_service_pb2.RunAgentResponse(event=e)

    async def StartRun(
        self, request: runtime_service_pb2.StartRunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> runtime_service_pb2.StartRunResponse:
        self._record(request, context)
        if not request.input:
            await abort_rich(context, grpc.StatusCode.INVALID_ARGUMENT, "input is empty", *BAD_INPUT)
        return runtime_service_pb2.StartRunResponse(
            run=make_run(input=request.input, request_key=request.request_key, metadata=request.metadata)
        )

    async def GetRun(
        self, request: runtime_service_pb2.GetRunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> runtime_service_pb2.GetRunResponse:
        self._record(request, context)
        if request.run_id == "missing":
            info = error_details_pb2.ErrorInfo(reason="RUN_NOT_FOUND", metadata={"run_id": "missing"})
            await abort_rich(context, grpc.StatusCode.NOT_FOUND, "no run missing", info)
        if request.run_id == "plain-error":
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "no details here")
        if request.run_id == "mismatch":
            # A rich status whose code contradicts the call's: the details must not be trusted.
            st = status_pb2.Status(code=code_pb2.INTERNAL, message="other")
            trailers = rpc_status.to_status(st).trailing_metadata
            await context.abort(grpc.StatusCode.NOT_FOUND, "not found", trailing_metadata=trailers)
        if request.run_id == "unknown-detail":
            await abort_rich(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                "run ended",
                duration_pb2.Duration(seconds=1),
                error_details_pb2.PreconditionFailure(
                    violations=[
                        error_details_pb2.PreconditionFailure.Violation(
                            type="PHASE", subject=request.run_id, description="run is COMPLETED"
                        )
                    ]
                ),
            )
        return runtime_service_pb2.GetRunResponse(
            run=make_run(request.run_id, phase=run_pb2.RUN_PHASE_COMPLETED)
        )

    async def ListRuns(
        self, request: runtime_service_pb2.ListRunsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> runtime_service_pb2.ListRunsResponse:
        self._record(request, context)
        runs = [make_run(f"run-{i}") for i in range(request.page_size)]
        return runtime_service_pb2.ListRunsResponse(runs=runs, next_page_token="next")

    async def StreamRunEvents(
        self, request: runtime_service_pb2.StreamRunEventsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[runtime_service_pb2.StreamRunEventsResponse]:
        self._record(request, context)
        try:
            for e in canned_events(request.run_id):
                if e.seq > request.after_seq:
                    yield runtime_service_pb2.StreamRunEventsResponse(event=e)
            if request.follow:
                await asyncio.Event().wait()  # tail forever: only the client's cancel ends it
        finally:
            self.stream_closed.set()

    async def CancelRun(
        self, request: runtime_service_pb2.CancelRunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> runtime_service_pb2.CancelRunResponse:
        self._record(request, context)
        return runtime_service_pb2.CancelRunResponse(
            run=make_run(request.run_id, phase=run_pb2.RUN_PHASE_CANCEL_REQUESTED, reason=request.reason)
        )

    async def ResolveApproval(
        self, request: runtime_service_pb2.ResolveApprovalRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> runtime_service_pb2.ResolveApprovalResponse:
        self._record(request, context)
        if request.expected_revision != 7:
            info = error_details_pb2.ErrorInfo(reason="STALE_REVISION")
            await abort_rich(context, grpc.StatusCode.ABORTED, "run moved on", info)
        return runtime_service_pb2.ResolveApprovalResponse(
            run=make_run(request.run_id, phase=run_pb2.RUN_PHASE_TOOL_STEP, revision=8)
        )


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeRuntime, str]]:
    servicer = FakeRuntime()
    server = grpc.aio.server()
    runtime_service_pb2_grpc.add_AgentRuntimeServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        await server.stop(grace=None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- asyncio client ---


async def test_async_run_agent_streams_events_in_order(fake: tuple[FakeRuntime, str]) -> None:
    servicer, target = fake
    budgets = run_pb2.Budgets(max_model_steps=3)
    async with AsyncClient(target) as client:
        events = [
            e
            async for e in client.run_agent(
                "refund-demo", "hi", budgets=budgets, request_key="k1", metadata={"a": "b"}, session_id="s1"
            )
        ]
    assert [e.seq for e in events] == [e.seq for e in canned_events()]
    assert events[-1].WhichOneof("event") == "run_ended"
    req = servicer.requests[0]
    assert (req.agent_name, req.input, req.request_key, req.session_id) == ("refund-demo", "hi", "k1", "s1")
    assert req.budgets.max_model_steps == 3 and dict(req.metadata) == {"a": "b"}
    # Streams get no deadline by default: runs can be long.
    assert servicer.time_remaining[0] is None


async def test_async_unary_calls(fake: tuple[FakeRuntime, str]) -> None:
    servicer, target = fake
    async with AsyncClient(target, timeout=7.0, metadata=[("X-Tenant", "t1")]) as client:
        started = await client.start_run("refund-demo", "hello", request_key="k", metadata={"m": "1"})
        assert (
            started.input == "hello" and started.request_key == "k" and dict(started.metadata) == {"m": "1"}
        )
        got = await client.get_run("run-9")
        assert got.run_id == "run-9" and got.phase == run_pb2.RUN_PHASE_COMPLETED
        page = await client.list_runs(
            page_size=3, page_token="t", phases=[run_pb2.RUN_PHASE_COMPLETED], agent_name="a", session_id="s"
        )
        assert [r.run_id for r in page.runs] == ["run-0", "run-1", "run-2"] and page.next_page_token == "next"
        cancelled = await client.cancel_run("run-9", reason="user asked")
        assert cancelled.phase == run_pb2.RUN_PHASE_CANCEL_REQUESTED and cancelled.reason == "user asked"
        resolved = await client.resolve_approval(
            "run-9", "ap-1", approve=False, args_hash="h", expected_revision=7, comment="no"
        )
        assert resolved.revision == 8
    list_req = servicer.requests[2]
    assert list(list_req.phases) == [run_pb2.RUN_PHASE_COMPLETED] and list_req.page_token == "t"
    resolve_req = servicer.requests[4]
    assert resolve_req.decision == run_pb2.APPROVAL_DECISION_REJECT and resolve_req.args_hash == "h"
    # Every unary call carries the client's deadline (not the 10 s default) and metadata; the
    # server sees it with some clock slack.
    for remaining in servicer.time_remaining:
        assert remaining is not None and 5.0 < remaining < 7.5
    assert all(md.get("x-tenant") == "t1" for md in servicer.invocation_metadata)


async def test_async_rpc_error_decodes_error_info_and_bad_request(fake: tuple[FakeRuntime, str]) -> None:
    _, target = fake
    async with AsyncClient(target) as client:
        with pytest.raises(clients.InvalidArgumentError) as caught:
            await client.start_run("refund-demo", "")
    err = caught.value
    assert isinstance(err, RPCError) and isinstance(err, clients.ClientError)
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT and err.status == err.code
    assert err.message == "input is empty"
    assert err.reason == "INPUT_EMPTY" and err.domain == "runtime.agentrt"
    assert err.metadata == {"field": "input"}
    assert [type(d) for d in err.details] == [error_details_pb2.ErrorInfo, error_details_pb2.BadRequest]
    bad = err.detail(error_details_pb2.BadRequest)
    assert bad is not None and bad.field_violations[0].field == "input"
    assert err.detail(error_details_pb2.RetryInfo) is None
    assert "INVALID_ARGUMENT" in str(err)


async def test_async_error_mid_stream_after_events(fake: tuple[FakeRuntime, str]) -> None:
    _, target = fake
    seen: list[int] = []
    async with AsyncClient(target) as client:
        with pytest.raises(clients.UnavailableError) as caught:
            async for e in client.run_agent("dies-mid-stream", "x"):
                seen.append(e.seq)
    assert seen == [1, 0]
    assert caught.value.reason == "WORKER_LOST"
    retry = caught.value.detail(error_details_pb2.RetryInfo)
    assert retry is not None and retry.retry_delay.seconds == 2


@pytest.mark.parametrize(
    ("run_id", "kind", "reason"),
    [
        ("missing", clients.NotFoundError, "RUN_NOT_FOUND"),
        ("plain-error", clients.PermissionDeniedError, ""),
        ("mismatch", clients.NotFoundError, ""),
    ],
)
async def test_async_error_kinds(
    fake: tuple[FakeRuntime, str], run_id: str, kind: type[RPCError], reason: str
) -> None:
    _, target = fake
    async with AsyncClient(target) as client:
        with pytest.raises(kind) as caught:
            await client.get_run(run_id)
    assert caught.value.reason == reason
    if run_id != "missing":
        # No rich status (or one that contradicts the call): no details, no reason.
        assert caught.value.grpc_status is None and caught.value.details == [] and caught.value.metadata == {}
    else:
        assert caught.value.metadata == {"run_id": "missing"}


async def test_unknown_detail_type_is_kept_packed(fake: tuple[FakeRuntime, str]) -> None:
    _, target = fake
    async with AsyncClient(target) as client:
        with pytest.raises(clients.FailedPreconditionError) as caught:
            await client.get_run("unknown-detail")
    packed, failure = caught.value.details
    assert isinstance(packed, any_pb2.Any) and packed.TypeName() == "google.protobuf.Duration"
    assert isinstance(failure, error_details_pb2.PreconditionFailure)
    assert caught.value.error_info is None and caught.value.reason == ""


async def test_async_stale_revision_is_aborted(fake: tuple[FakeRuntime, str]) -> None:
    _, target = fake
    async with AsyncClient(target) as client:
        with pytest.raises(clients.AbortedError) as caught:
            await client.resolve_approval("r", "ap", approve=True, args_hash="h", expected_revision=1)
    assert caught.value.reason == "STALE_REVISION"


async def test_async_stream_events_replays_after_seq_and_closes_follow(fake: tuple[FakeRuntime, str]) -> None:
    servicer, target = fake
    async with AsyncClient(target) as client:
        replay = [e.seq async for e in client.stream_events("run-5", after_seq=2)]
        assert replay == [3, 4]
        async with client.stream_events("run-5", follow=True) as stream:
            first = await anext(stream)
            assert first.run_id == "run-5"
        # Leaving the block cancels the call; the server's handler sees it end.
        await asyncio.wait_for(servicer.stream_closed.wait(), timeout=10)
        with pytest.raises(StopAsyncIteration):
            await anext(stream)
    req = servicer.requests[1]
    assert req.follow and req.run_id == "run-5"


async def test_async_unreachable_target_is_unavailable() -> None:
    async with AsyncClient(f"127.0.0.1:{free_port()}", timeout=5) as client:
        with pytest.raises(clients.UnavailableError):
            await client.get_run("r")
        with pytest.raises(clients.UnavailableError):
            async for _ in client.run_agent("a", "b"):
                pass


async def test_async_client_does_not_close_a_given_channel(fake: tuple[FakeRuntime, str]) -> None:
    _, target = fake
    channel = grpc.aio.insecure_channel(target)
    try:
        async with AsyncClient(channel=channel) as client:
            await client.get_run("a")
        async with AsyncClient(channel=channel) as client:
            assert (await client.get_run("b")).run_id == "b"
    finally:
        await channel.close(None)


def test_default_target_is_loopback_unless_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTRT_TARGET", raising=False)
    assert clients.default_target() == "127.0.0.1:50051"
    monkeypatch.setenv("AGENTRT_TARGET", "")
    assert clients.default_target() == "127.0.0.1:50051"
    monkeypatch.setenv("AGENTRT_TARGET", "runtime:6000")
    assert clients.default_target() == "runtime:6000"
    assert clients.DEFAULT_TIMEOUT == 10.0


# --- synchronous client (run in a thread: the fake's event loop must keep serving) ---


async def test_sync_client_round_trip(fake: tuple[FakeRuntime, str]) -> None:
    servicer, target = fake

    def scenario() -> None:
        with Client(target, timeout=5.0, metadata=[("x-tenant", "t2")]) as client:
            events = list(client.run_agent("refund-demo", "hi", request_key="k"))
            assert [e.seq for e in events] == [e.seq for e in canned_events()]
            assert client.start_run("refund-demo", "x").input == "x"
            assert client.get_run("run-3").run_id == "run-3"
            assert len(client.list_runs(page_size=2).runs) == 2
            assert client.cancel_run("run-3", reason="r").reason == "r"
            assert (
                client.resolve_approval(
                    "run-3", "ap", approve=True, args_hash="h", expected_revision=7
                ).revision
                == 8
            )
            assert [e.seq for e in client.stream_events("run-3", after_seq=3)] == [4]

    await asyncio.to_thread(scenario)
    assert servicer.requests[-2].decision == run_pb2.APPROVAL_DECISION_APPROVE
    assert all(md.get("x-tenant") == "t2" for md in servicer.invocation_metadata)
    assert servicer.time_remaining[0] is None  # RunAgent: no deadline
    assert all(r is not None and 3.0 < r < 5.5 for r in servicer.time_remaining[1:6])


async def test_sync_rpc_error_decodes_details(fake: tuple[FakeRuntime, str]) -> None:
    _, target = fake

    def scenario() -> tuple[RPCError, RPCError, RPCError, list[int]]:
        with Client(target) as client:
            with pytest.raises(RPCError) as bad:
                client.start_run("refund-demo", "")
            with pytest.raises(RPCError) as mismatch:
                client.get_run("mismatch")
            seen: list[int] = []
            with pytest.raises(RPCError) as mid:
                for e in client.run_agent("dies-mid-stream", "x"):
                    seen.append(e.seq)
            return bad.value, mismatch.value, mid.value, seen

    bad, mismatch, mid, seen = await asyncio.to_thread(scenario)
    assert isinstance(bad, clients.InvalidArgumentError) and bad.reason == "INPUT_EMPTY"
    assert bad.metadata == {"field": "input"}
    assert [type(d) for d in bad.details] == [error_details_pb2.ErrorInfo, error_details_pb2.BadRequest]
    assert isinstance(mismatch, clients.NotFoundError) and mismatch.grpc_status is None
    assert isinstance(mid, clients.UnavailableError) and mid.reason == "WORKER_LOST" and seen == [1, 0]


async def test_sync_stream_cancel_stops_iteration(fake: tuple[FakeRuntime, str]) -> None:
    servicer, target = fake

    def scenario() -> list[int]:
        with Client(target) as client:
            with client.stream_events("run-5", follow=True) as stream:
                first = next(stream)
            return [first.seq, *(e.seq for e in stream)]

    assert await asyncio.to_thread(scenario) == [1]
    await asyncio.wait_for(servicer.stream_closed.wait(), timeout=10)


def test_sync_unreachable_target_is_unavailable() -> None:
    with Client(f"127.0.0.1:{free_port()}", timeout=5) as client:
        with pytest.raises(clients.UnavailableError) as caught:
            client.get_run("r")
        assert caught.value.reason == ""
        with pytest.raises(clients.UnavailableError):
            list(client.stream_events("r"))


def test_sync_client_does_not_close_a_given_channel() -> None:
    channel = grpc.insecure_channel(f"127.0.0.1:{free_port()}")
    try:
        with Client(channel=channel):
            pass
        # Still usable: fails with UNAVAILABLE (nobody listens), not "closed channel".
        with Client(channel=channel, timeout=5) as client, pytest.raises(clients.UnavailableError):
            client.get_run("r")
    finally:
        channel.close()


def test_non_call_rpc_error_becomes_unknown() -> None:
    from agentrt.client import _errors

    err = _errors.from_call(grpc.RpcError("odd"))
    assert type(err) is RPCError and err.code == grpc.StatusCode.UNKNOWN and err.details == []
