"""Runtime memory with 100 stream followers that never read, on a run with ~10 MB of events.

A real tool host and runtime process (SQLite). The agent calls ``noop.echo`` with a ~40 KB
argument many times: each step stores three events of ~40 KB (model.completed, tool.started,
tool.completed), all under the inline payload limit. Then:

1. **ended**: the run has ended; 100 ``StreamRunEvents(follow=true)`` calls that never read;
2. **live**: a new run of the same agent with 100 never-reading followers attached from its
   start, while it produces its ~10 MB;
3. **dropped**: after ``streams.stall_timeout_s`` the stalled followers are dropped.

Prints the runtime's RSS (VmRSS) before and after each; the figure to watch is the growth over
the baseline, which must stay within 50 MB. Clients are in this process, so their buffers do not
count. Run: ``python bench/followers.py`` (``--followers 100 --mb 10 --stall 5``). Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2, runtime_service_pb2_grpc  # noqa: E402
from agentrt.testing import spawn_runtime, spawn_tool_host  # noqa: E402

BLOB_CHARS = 40_000
EVENTS_PER_STEP = 3


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def runtime_env(db_url: str, tool_host: str, *, steps: int, stall_s: float) -> dict[str, str]:
    script = [
        {"text": f"echo {i}", "tool_calls": [{"tool": "noop.echo", "arguments": {"blob": "{input}", "i": i}}]}
        for i in range(steps)
    ]
    agent = {
        "tools": ["noop.echo"],
        "model": {"provider": "scripted", "options": {"steps": [*script, {"text": "done"}]}},
        "budgets": {"max_model_steps": steps + 1, "max_tool_calls": steps, "timeout_s": 600},
    }
    return dict(
        os.environ,
        AGENTRT_DB_URL=db_url,
        AGENTRT_TOOL_HOSTS=json.dumps([{"name": "bench", "address": tool_host}]),
        AGENTRT_AGENTS=json.dumps({"big": agent}),
        AGENTRT_STREAMS__STALL_TIMEOUT_S=json.dumps(stall_s),
    )


async def settle(pid: int, *, seconds: float = 3.0, limit_s: float = 20.0) -> float:
    """RSS once it stopped moving by more than 1 MB over ``seconds`` (bounded by ``limit_s``)."""
    began = time.monotonic()
    last = rss_mb(pid)
    while time.monotonic() - began < limit_s:
        await asyncio.sleep(seconds)
        now = rss_mb(pid)
        if abs(now - last) < 1.0:
            return now
        last = now
    return last


async def open_followers(
    address: str, run_id: str, count: int, *, small_window: bool
) -> tuple[list[grpc.aio.Channel], list[grpc.aio.UnaryStreamCall[object, object]]]:
    """``count`` follow streams that never read, ten per channel."""
    options = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 65536)] if small_window else []
    channels = [grpc.aio.insecure_channel(address, options=options) for _ in range((count + 9) // 10)]
    calls = []
    for i in range(count):
        stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channels[i // 10])
        call = stub.StreamRunEvents(runtime_service_pb2.StreamRunEventsRequest(run_id=run_id, follow=True))
        await call.wait_for_connection()
        calls.append(call)
    return channels, calls


async def close_all(
    channels: list[grpc.aio.Channel], calls: list[grpc.aio.UnaryStreamCall[object, object]]
) -> str:
    """Cancel what is still open; returns how the calls ended, e.g. ``{'RESOURCE_EXHAUSTED': 100}``."""
    endings: dict[str, int] = {}
    for call in calls:
        if call.done():
            code = await call.code()
            endings[code.name] = endings.get(code.name, 0) + 1
        else:
            endings["open"] = endings.get("open", 0) + 1
            call.cancel()
    for channel in channels:
        await channel.close()
    return json.dumps(endings, sort_keys=True)


async def wait_ended(stub: runtime_service_pb2_grpc.AgentRuntimeServiceStub, run_id: str) -> run_pb2.Run:
    while True:
        run = (await stub.GetRun(runtime_service_pb2.GetRunRequest(run_id=run_id), timeout=10)).run
        if run.phase in (run_pb2.RUN_PHASE_COMPLETED, run_pb2.RUN_PHASE_FAILED):
            return run
        await asyncio.sleep(0.2)


async def bench(address: str, pid: int, args: argparse.Namespace) -> None:
    blob = "x" * BLOB_CHARS
    async with grpc.aio.insecure_channel(address) as channel:
        stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channel)
        started = time.monotonic()
        run_id, count, size = "", 0, 0
        async for response in stub.RunAgent(
            runtime_service_pb2.RunAgentRequest(agent_name="big", input=blob)
        ):
            run_id = response.event.run_id
            count += 1
            size += response.event.ByteSize()
        run = await wait_ended(stub, run_id)
        print(
            f"run {run_id}: {run_pb2.RunPhase.Name(run.phase)}, {run.last_seq} events, "
            f"{size / 1e6:.1f} MB on the wire, {time.monotonic() - started:.1f}s"
        )
        baseline = await settle(pid)
        print(f"baseline RSS after the run and one full read:      {baseline:7.1f} MB")

        channels, calls = await open_followers(
            address, run_id, args.followers, small_window=args.small_window
        )
        ended = await settle(pid)
        print(
            f"{args.followers} never-reading followers, ended run:        {ended:7.1f} MB "
            f"({ended - baseline:+.1f} MB)"
        )
        await asyncio.sleep(args.stall + 2)
        dropped = await settle(pid)
        print(
            f"after stall_timeout_s={args.stall:g}:                      {dropped:7.1f} MB "
            f"({dropped - baseline:+.1f} MB); calls: {await close_all(channels, calls)}"
        )

        start = await stub.StartRun(runtime_service_pb2.StartRunRequest(agent_name="big", input=blob))
        channels, calls = await open_followers(
            address, start.run.run_id, args.followers, small_window=args.small_window
        )
        peak = rss_mb(pid)
        finished = asyncio.ensure_future(wait_ended(stub, start.run.run_id))
        while not finished.done():
            peak = max(peak, rss_mb(pid))
            await asyncio.sleep(0.1)
        live = await settle(pid, seconds=1.0, limit_s=args.stall / 2)
        print(
            f"{args.followers} never-reading followers, live run:         {live:7.1f} MB "
            f"({live - baseline:+.1f} MB; peak while it ran {peak:.1f} MB, {peak - baseline:+.1f})"
        )
        await asyncio.sleep(args.stall + 2)
        after = await settle(pid)
        print(
            f"after stall_timeout_s={args.stall:g}:                      {after:7.1f} MB "
            f"({after - baseline:+.1f} MB); calls: {await close_all(channels, calls)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--followers", type=int, default=100)
    parser.add_argument("--mb", type=float, default=10.0, help="event volume of the run, MB")
    parser.add_argument("--stall", type=float, default=5.0, help="streams.stall_timeout_s")
    parser.add_argument(
        "--small-window",
        action="store_true",
        help="followers announce a 64 KiB HTTP/2 window (no BDP growth): the server blocks at once",
    )
    args = parser.parse_args()
    steps = max(1, round(args.mb * 1e6 / (EVENTS_PER_STEP * BLOB_CHARS)))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with spawn_tool_host(work / "host", plugins=["agentrt.plugins.demo_tools"]) as host:
            env = runtime_env(
                f"sqlite:///{work / 'rt.sqlite'}", host.address, steps=steps, stall_s=args.stall
            )
            with spawn_runtime(["--listen", "127.0.0.1:0"], cwd=work, env=env) as runtime:
                asyncio.run(bench(runtime.address, runtime.process.pid, args))
                drops = runtime.stderr_text().count("dropping a stream reader")
        print(f"followers the runtime dropped as stalled: {drops}")


if __name__ == "__main__":
    main()
