"""grpc.aio on uvloop: a server and a client in one process, the way both servers use them.

Unary, server-streaming and bidirectional calls, a client cancelling a stream (the handler sees
it), deadlines, a graceful stop that lets an in-flight call finish and refuses new ones, and
signal handlers through ``loop.add_signal_handler``. Each runs on a loop from
``agentrt.toolhost._loop.run_on``, on uvloop and, for comparison, on asyncio.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import pytest

from agentrt.toolhost._loop import resolve_loop, run_on

LOOPS = [pytest.param("uvloop", id="uvloop"), pytest.param("asyncio", id="asyncio")]
_log = logging.getLogger("tests.grpc_on_uvloop")


def _ident(value: bytes) -> bytes:
    return value


class _Service:
    """Echo, Count (server stream), Chat (bidi), Slow (unary that waits to be released)."""

    def __init__(self) -> None:
        self.count_cancelled = asyncio.Event()
        self.slow_started = asyncio.Event()
        self.release_slow = asyncio.Event()

    async def echo(self, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return b"echo:" + request

    async def count(
        self, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]
    ) -> AsyncIterator[bytes]:
        try:
            for i in range(int(request)):
                yield str(i).encode()
                await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            self.count_cancelled.set()
            raise

    async def chat(
        self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[bytes, bytes]
    ) -> AsyncIterator[bytes]:
        async for request in requests:
            yield request.upper()

    async def slow(self, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        self.slow_started.set()
        await self.release_slow.wait()
        return b"done"

    def handler(self) -> grpc.GenericRpcHandler:
        kw = {"request_deserializer": _ident, "response_serializer": _ident}
        return grpc.method_handlers_generic_handler(
            "test.Loop",
            {
                "Echo": grpc.unary_unary_rpc_method_handler(self.echo, **kw),
                "Count": grpc.unary_stream_rpc_method_handler(self.count, **kw),
                "Chat": grpc.stream_stream_rpc_method_handler(self.chat, **kw),
                "Slow": grpc.unary_unary_rpc_method_handler(self.slow, **kw),
            },
        )


Body = Callable[[_Service, grpc.aio.Server, grpc.aio.Channel], Awaitable[None]]


def _run(loop_name: str, body: Body) -> str:
    """Serve _Service on loopback, run ``body`` with a channel to it; return the loop's module."""
    plan = resolve_loop(loop_name, extra="agentrt-toolhost[uvloop]")

    async def main() -> str:
        service = _Service()
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((service.handler(),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                await body(service, server, channel)
        finally:
            await server.stop(0)
        return type(asyncio.get_running_loop()).__module__

    return run_on(plan, main(), log=_log)


def _unary(channel: grpc.aio.Channel, name: str) -> grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]:
    return channel.unary_unary(f"/test.Loop/{name}", request_serializer=_ident, response_deserializer=_ident)


@pytest.fixture(params=LOOPS)
def loop_name(request: pytest.FixtureRequest) -> str:
    if request.param == "uvloop":
        pytest.importorskip("uvloop")
    return str(request.param)


def test_unary_and_streaming_calls(loop_name: str) -> None:
    async def body(service: _Service, server: grpc.aio.Server, channel: grpc.aio.Channel) -> None:
        assert await _unary(channel, "Echo")(b"hi", timeout=5) == b"echo:hi"
        count = channel.unary_stream(
            "/test.Loop/Count", request_serializer=_ident, response_deserializer=_ident
        )
        assert [m async for m in count(b"5", timeout=5)] == [b"0", b"1", b"2", b"3", b"4"]
        chat = channel.stream_stream(
            "/test.Loop/Chat", request_serializer=_ident, response_deserializer=_ident
        )
        call = chat(timeout=5)
        for word in (b"a", b"bc"):
            await call.write(word)
            assert await call.read() == word.upper()
        await call.done_writing()
        assert await call.read() is grpc.aio.EOF
        assert await call.code() == grpc.StatusCode.OK

    assert _run(loop_name, body).partition(".")[0] == loop_name


def test_a_cancelled_stream_reaches_the_handler(loop_name: str) -> None:
    async def body(service: _Service, server: grpc.aio.Server, channel: grpc.aio.Channel) -> None:
        count = channel.unary_stream(
            "/test.Loop/Count", request_serializer=_ident, response_deserializer=_ident
        )
        call = count(b"100000", timeout=10)
        assert await call.read() == b"0"
        assert call.cancel()
        await asyncio.wait_for(service.count_cancelled.wait(), 5)
        assert call.cancelled() and await call.code() == grpc.StatusCode.CANCELLED

    _run(loop_name, body)


def test_a_deadline_ends_a_waiting_call(loop_name: str) -> None:
    async def body(service: _Service, server: grpc.aio.Server, channel: grpc.aio.Channel) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _unary(channel, "Slow")(b"", timeout=0.2)
        assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED

    _run(loop_name, body)


def test_a_graceful_stop_finishes_the_call_in_flight_and_refuses_new_ones(loop_name: str) -> None:
    async def body(service: _Service, server: grpc.aio.Server, channel: grpc.aio.Channel) -> None:
        in_flight = asyncio.ensure_future(_unary(channel, "Slow")(b"", timeout=10))
        await asyncio.wait_for(service.slow_started.wait(), 5)
        stopping = asyncio.ensure_future(server.stop(5))
        await asyncio.sleep(0)  # let stop() begin: from here the server takes no new call
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _unary(channel, "Echo")(b"late", timeout=5, wait_for_ready=False)
        # gRPC core refuses a call that races the start of the stop with either code, as often on
        # asyncio as on uvloop (about 1 in 5 CANCELLED on both, 40 stops each).
        assert caught.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
        assert not stopping.done()
        service.release_slow.set()
        assert await asyncio.wait_for(in_flight, 5) == b"done"
        await asyncio.wait_for(stopping, 5)

    _run(loop_name, body)


def test_signal_handlers_through_the_loop(loop_name: str) -> None:
    async def body(service: _Service, server: grpc.aio.Server, channel: grpc.aio.Channel) -> None:
        loop = asyncio.get_running_loop()
        got = asyncio.Event()
        loop.add_signal_handler(signal.SIGUSR1, got.set)
        try:
            os.kill(os.getpid(), signal.SIGUSR1)
            await asyncio.wait_for(got.wait(), 5)
            # The loop keeps serving after the handler ran.
            assert await _unary(channel, "Echo")(b"after", timeout=5) == b"echo:after"
        finally:
            assert loop.remove_signal_handler(signal.SIGUSR1)

    _run(loop_name, body)
