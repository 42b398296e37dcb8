"""What grpc.aio itself costs per message on this machine: the floor under agentrt's step loop.

A bare server process (uvloop, no interceptors, bytes in and out) and this client measure:

- a unary round trip (what one tool call is today);
- ping-pong on one persistent bidi stream (what a multiplexed tool stream would cost per call);
- one server-streamed message (what each RunAgent response costs), by the server's and the
  client's CPU per message.

Each figure is wall microseconds per operation, and the CPU of both processes per operation
(user + system, from /proc). Prints figures; asserts nothing.

Run: ``python bench/grpc_floor.py`` (``--ops 5000``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import grpc

try:
    import uvloop
except ImportError:  # the figures are then asyncio's
    uvloop = None  # type: ignore[assignment]

PAYLOAD = b"\x0a\x40" + b"x" * 64  # a small message, about one tool call's or one event's size

SERVER = r"""
import asyncio
import grpc
try:
    import uvloop
except ImportError:
    uvloop = None
PAYLOAD = b"\x0a\x40" + b"x" * 64

async def unary(request, context):
    return request

async def bidi(requests, context):
    while True:
        message = await context.read()
        if message is grpc.aio.EOF:
            return
        await context.write(message)

async def stream(request, context):
    for _ in range(int(request)):
        await context.write(PAYLOAD)

async def main():
    server = grpc.aio.server()
    handlers = {
        "U": grpc.unary_unary_rpc_method_handler(unary),
        "B": grpc.stream_stream_rpc_method_handler(bidi),
        "S": grpc.unary_stream_rpc_method_handler(stream),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("floor.Floor", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()

(uvloop.run if uvloop else asyncio.run)(main())
"""


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(port: str, server_pid: int, ops: int) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        unary = channel.unary_unary("/floor.Floor/U")
        bidi = channel.stream_stream("/floor.Floor/B")
        stream = channel.unary_stream("/floor.Floor/S")
        for _ in range(200):  # warm up the channel
            await unary(PAYLOAD)

        async def run_unary() -> None:
            for _ in range(ops):
                await unary(PAYLOAD)

        async def run_bidi() -> None:
            call = bidi()
            for _ in range(ops):
                await call.write(PAYLOAD)
                await call.read()
            await call.done_writing()

        async def run_stream() -> None:
            async for _ in stream(str(ops).encode()):
                pass

        print(f"grpc.aio floor, {ops} operations each, {os.cpu_count()} cores, client loop {_loop_name()}")
        for name, run in (
            ("unary round trip", run_unary),
            ("bidi ping-pong, one stream", run_bidi),
            ("server-streamed message", run_stream),
        ):
            server_before, client_before = cpu_s(server_pid), time.process_time()
            began = time.perf_counter()
            await run()
            wall = (time.perf_counter() - began) / ops * 1e6
            client = (time.process_time() - client_before) / ops * 1e6
            server = (cpu_s(server_pid) - server_before) / ops * 1e6
            print(f"{name:28s} {wall:8.1f} us wall   CPU: server {server:6.1f} us, client {client:6.1f} us")


def _loop_name() -> str:
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ops", type=int, default=5000)
    args = parser.parse_args()
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = server.stdout.readline().strip()
        coroutine = measure(port, server.pid, args.ops)
        if uvloop is not None:
            uvloop.run(coroutine)
        else:
            asyncio.run(coroutine)
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
