"""Tool host hot path: N unary InvokeTool calls of ``noop.echo`` against a real host process.

``noop.echo`` is read-only and idempotent, so each call is the tool host's lean path: the fencing
check, the tool, and one ledger write (its outcome; no RUNNING entry). Every call carries fresh
metadata (idempotency key, run id, call id, attempt, fencing token) and a deadline, as the runtime
sends them. Calls are made one after another on one channel; it prints calls/s, the host
process's CPU per call, and the ledger's entries per call (its rows over the calls made).

Run: ``python bench/tool_host_call.py [--calls 5000] [--warmup 300]``. Other load on the machine
shows in the figures: run it on a quiet one. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path

import grpc.aio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentrt.proto.toolhost.v1 import tool_host_service_pb2 as pb  # noqa: E402
from agentrt.proto.toolhost.v1 import tool_host_service_pb2_grpc as pb_grpc  # noqa: E402
from agentrt.testing import spawn_tool_host  # noqa: E402
from agentrt.toolhost._host import LEDGER_FILE  # noqa: E402

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


async def calls(stub: pb_grpc.ToolHostServiceStub, count: int, run_id: str) -> None:
    request = pb.InvokeToolRequest(tool=TOOL, arguments_json=ARGUMENTS)
    for call in range(count):
        metadata = (
            ("x-agentrt-idempotency-key", uuid.uuid4().hex),
            ("x-agentrt-run-id", run_id),
            ("x-agentrt-call-id", f"call-{call}"),
            ("x-agentrt-attempt", "1"),
            ("x-agentrt-fencing-token", "1"),
        )
        reply = await stub.InvokeTool(request, timeout=TIMEOUT_S, metadata=metadata)
        if not reply.result_json:  # a figure from failed calls would be meaningless
            raise RuntimeError(f"{TOOL} failed: {reply}")


async def measure(address: str, pid: int, args: argparse.Namespace) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.ToolHostServiceStub(channel)
        await stub.ListTools(pb.ListToolsRequest(), timeout=30, wait_for_ready=True)
        await calls(stub, args.warmup, "bench-warmup")  # imports, caches, the ledger's first pages
        cpu_before = cpu_seconds(pid)
        begun = time.perf_counter()
        await calls(stub, args.calls, "bench")
        elapsed = time.perf_counter() - begun
        cpu = cpu_seconds(pid) - cpu_before
    print(f"{args.calls} sequential calls: {args.calls / elapsed:8.0f} calls/s")
    print(f"host CPU per call:        {cpu / args.calls * 1000:8.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=5000, help="sequential calls measured")
    parser.add_argument("--warmup", type=int, default=300, help="calls made before measuring")
    args = parser.parse_args()
    print(f"agentrt tool host hot path: {TOOL} on a real tool host process, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="agentrt-bench-") as tmp:
        data_dir = Path(tmp) / "host"
        with spawn_tool_host(data_dir, plugins=["agentrt.plugins.demo_tools"]) as host:
            asyncio.run(measure(host.address, host.pid, args))
        with sqlite3.connect(data_dir / LEDGER_FILE) as db:
            (rows,) = db.execute("SELECT count(*) FROM operations").fetchone()
        print(f"ledger entries per call:  {rows / (args.calls + args.warmup):8.3f}")


if __name__ == "__main__":
    main()
