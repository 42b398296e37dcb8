"""Tool-call benchmark: what one InvokeTool round trip costs, against the floor of a bare one.

A real tool host process (``agentrt.plugins.demo_tools``) serves the no-op tool
``noop.echo``. Every call carries fresh R3.3 metadata (idempotency key, run id,
call id, attempt, fencing token) and a deadline, as the runtime sends them, so
each one is a full ledger round: fencing check, RUNNING recorded, tool run,
outcome recorded. It prints:

- sequential ms/call (mean, p50, p99) and the host process's CPU per call,
- calls/s with 50 callers at once, each making 100 calls one after another,
- the floor: a ``grpc.health.v1.Health/Check`` round trip to the same process on
  the same channel (gRPC only: no ledger, no tool).

Run: ``python bench/tool_call.py`` (or ``python bench/tool_call.py --calls 2000 --concurrent 50
--calls-each 100``); ``--ledger-url postgresql://...`` puts the host's ledger in PostgreSQL (a
throwaway schema, left for the caller to drop). Other load on the machine shows in the figures:
run it on a quiet one.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import grpc.aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentrt.proto.toolhost.v1 import tool_host_service_pb2 as pb  # noqa: E402
from agentrt.proto.toolhost.v1 import tool_host_service_pb2_grpc as pb_grpc  # noqa: E402
from agentrt.testing import spawn_tool_host  # noqa: E402

if TYPE_CHECKING:
    from agentrt.proto.toolhost.v1.tool_host_service_pb2_grpc import ToolHostServiceAsyncStub

TOOL = "noop.echo"
ARGUMENTS = '{"i": 1}'
TIMEOUT_S = 5.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux), or NaN."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def invoke(stub: ToolHostServiceAsyncStub, run_id: str, call: int) -> None:
    metadata = (
        ("x-agentrt-idempotency-key", uuid.uuid4().hex),
        ("x-agentrt-run-id", run_id),
        ("x-agentrt-call-id", f"call-{call}"),
        ("x-agentrt-attempt", "1"),
        ("x-agentrt-fencing-token", "1"),
    )
    reply = await stub.InvokeTool(
        pb.InvokeToolRequest(tool=TOOL, arguments_json=ARGUMENTS), timeout=TIMEOUT_S, metadata=metadata
    )
    if not reply.result_json:  # a figure from failed calls would be meaningless
        raise RuntimeError(f"{TOOL} failed: {reply}")


async def sequential(stub: ToolHostServiceAsyncStub, calls: int) -> list[float]:
    times = []
    for call in range(calls):
        begun = time.perf_counter()
        await invoke(stub, "bench-sequential", call)
        times.append(time.perf_counter() - begun)
    return times


async def concurrent(stub: ToolHostServiceAsyncStub, callers: int, calls_each: int) -> float:
    async def caller(index: int) -> None:
        for call in range(calls_each):
            await invoke(stub, f"bench-concurrent-{index}", call)

    begun = time.perf_counter()
    await asyncio.gather(*(caller(i) for i in range(callers)))
    return time.perf_counter() - begun


async def floor(health: health_pb2_grpc.HealthStub, calls: int) -> float:
    request = health_pb2.HealthCheckRequest()
    begun = time.perf_counter()
    for _ in range(calls):
        await health.Check(request, timeout=TIMEOUT_S)
    return (time.perf_counter() - begun) / calls


async def measure(address: str, pid: int, args: argparse.Namespace) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        stub: ToolHostServiceAsyncStub = pb_grpc.ToolHostServiceStub(channel)
        await stub.ListTools(pb.ListToolsRequest(), timeout=30, wait_for_ready=True)
        await sequential(stub, args.warmup)  # imports, caches, the ledger's first pages
        floor_s = await floor(health_pb2_grpc.HealthStub(channel), args.calls)
        cpu_before = cpu_seconds(pid)
        times = await sequential(stub, args.calls)
        cpu_per_call = (cpu_seconds(pid) - cpu_before) / args.calls
        burst = await concurrent(stub, args.concurrent, args.calls_each)

    ordered = sorted(times)
    mean = statistics.mean(times)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    total = args.concurrent * args.calls_each
    print(f"floor: health Check round trip      {floor_s * 1000:8.3f} ms")
    print(
        f"sequential {args.calls} calls:  mean {mean * 1000:7.3f} ms/call   p50 {p50 * 1000:7.3f} ms   "
        f"p99 {p99 * 1000:7.3f} ms   ({1 / mean:6.0f} calls/s, {mean / floor_s:4.1f}x floor)"
    )
    print(f"host CPU per sequential call:      {cpu_per_call * 1000:8.3f} ms")
    print(
        f"concurrent {args.concurrent} callers x {args.calls_each} calls: "
        f"{total / burst:8.0f} calls/s  ({burst:.2f} s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000, help="sequential calls")
    parser.add_argument("--concurrent", type=int, default=50, help="callers at once")
    parser.add_argument("--calls-each", type=int, default=100, help="calls per concurrent caller")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument(
        "--ledger-url", default="", help="run the host on a shared PostgreSQL ledger (default: SQLite)"
    )
    args = parser.parse_args()
    ledger_args = ["--ledger-url", args.ledger_url, "--ledger-schema", f"bench_{uuid.uuid4().hex[:8]}"]
    print(
        f"agentrt tool-call benchmark: {TOOL} on a real tool host process, fresh idempotency keys, "
        f"{os.cpu_count()} cores"
    )
    with (
        tempfile.TemporaryDirectory(prefix="agentrt-bench-") as tmp,
        spawn_tool_host(
            Path(tmp) / "host",
            plugins=["agentrt.plugins.demo_tools"],
            extra_args=ledger_args if args.ledger_url else [],
        ) as host,
    ):
        asyncio.run(measure(host.address, host.pid, args))


if __name__ == "__main__":
    main()
