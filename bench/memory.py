"""Runtime memory and file descriptors under many runs with distinct inline model options (issue 9).

A real runtime process (SQLite) runs inline agents against a local fake OpenAI server speaking the
real wire protocol over HTTP, in this process. Every run sends model options of its own
(``temperature``, ``max_tokens``), so every run asks for a provider, with an HTTP client, of its
own: the case that once grew a runtime by 90 MB and 150 file descriptors for 150 runs.

Figures:

1. RSS and open fds of the runtime before and after ``--runs`` (1,000) such runs, after a warm-up
   that fills the provider cache to its bound; they should stay flat (within 10%).
2. RSS sampled over ``--long-runs`` (10,000) sequential runs, with the least-squares slope per
   1,000 runs after the first ``--warmup`` runs; there should be no growth trend.

Run: ``python bench/memory.py`` (quick: ``--runs 200 --long-runs 1000``). Prints figures; asserts
nothing. Linux only (reads ``/proc``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc
from google.protobuf import struct_pb2

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2, runtime_service_pb2_grpc  # noqa: E402
from agentrt.testing import (  # noqa: E402
    FakeModelServer,
    FakeResponse,
    RecordedRequest,
    spawn_runtime,
)

KEY_ENV = "BENCH_MEMORY_MODEL_KEY"
ANSWER = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "model": "gpt-bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }
).encode()


def answer(_request: RecordedRequest) -> FakeResponse:
    return FakeResponse(status=200, headers=(("content-type", "application/json"),), body=ANSWER)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def slope_per_1000(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of (runs, MB), in MB per 1,000 runs."""
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mean_x) ** 2 for x in xs)
    cov = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    return cov / var * 1000 if var else 0.0


class Runner:
    """Sequential RunAgent calls, each with options no earlier run used."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(address)
        self.stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(self.channel)
        self.count = 0

    def run(self) -> None:
        n = self.count
        self.count += 1
        options = struct_pb2.Struct()
        options.update({"temperature": (n % 200) / 100, "max_tokens": n + 1})
        agent = run_pb2.AgentSpec(name="bench", model=run_pb2.ModelSpec(profile="gpt", options=options))
        request = runtime_service_pb2.RunAgentRequest(agent=agent, input=f"hello {n}")
        events = list(self.stub.RunAgent(request, timeout=60))
        last = events[-1] if events else None
        if last is None or last.event.WhichOneof("event") != "run_ended":
            raise RuntimeError(f"run {n} did not end: {last}")
        if last.event.run_ended.phase != run_pb2.RUN_PHASE_COMPLETED:
            raise RuntimeError(f"run {n} ended {last.event.run_ended}")

    def close(self) -> None:
        self.channel.close()


def settle(server: FakeModelServer, cap: int) -> None:
    # Evicted providers close in the background; give the last closes a bounded moment.
    end = time.monotonic() + 5
    while server.open_connections > cap and time.monotonic() < end:
        time.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="runs between the before/after figures")
    parser.add_argument("--long-runs", type=int, default=10_000, help="runs of the RSS trend")
    parser.add_argument("--warmup", type=int, default=200, help="runs before any figure")
    parser.add_argument("--sample-every", type=int, default=250, help="runs between RSS samples")
    parser.add_argument("--max-providers", type=int, default=64, help="model_cache.max_providers")
    args = parser.parse_args()

    with (
        tempfile.TemporaryDirectory(prefix="agentrt-bench-memory-") as tmp,
        FakeModelServer(default=answer, keep_requests=100) as server,
    ):
        work = Path(tmp)
        options = f'{{ base_url = "{server.url}/v1", api_key_env = "{KEY_ENV}", stream = false }}'
        config = work / "agentrt.toml"
        config.write_text(
            f'db_url = "sqlite:///{work / "agentrt.sqlite"}"\nsqlite_synchronous = "NORMAL"\n'
            f"[model_cache]\nmax_providers = {args.max_providers}\n"
            f'[model_profiles.gpt]\nprovider = "openai"\nname = "gpt-bench"\noptions = {options}\n'
            'inline_options = ["temperature", "max_tokens"]\n[inline_agents]\nenabled = true\n'
        )
        env = dict(os.environ, **{KEY_ENV: "sk-bench-not-real"})
        with spawn_runtime(["--config", str(config), "--listen", "127.0.0.1:0"], cwd=work, env=env) as rt:
            pid = rt.process.pid
            runner = Runner(rt.address)
            try:
                start_rss, start_fds = rss_mb(pid), open_fds(pid)
                for _ in range(args.warmup):
                    runner.run()
                settle(server, args.max_providers)
                before = (rss_mb(pid), open_fds(pid), server.open_connections)
                began = time.monotonic()
                for _ in range(args.runs):
                    runner.run()
                elapsed = time.monotonic() - began
                settle(server, args.max_providers)
                after = (rss_mb(pid), open_fds(pid), server.open_connections)
                print(f"runtime at start: RSS {start_rss:.1f} MB, {start_fds} open fds")
                print(
                    f"after {args.warmup} warm-up runs: RSS {before[0]:.1f} MB, {before[1]} fds, "
                    f"{before[2]} connections to the model server"
                )
                per_run_ms = elapsed / args.runs * 1000
                print(
                    f"after {args.runs} more runs with distinct inline options ({per_run_ms:.1f} ms/run): "
                    f"RSS {after[0]:.1f} MB ({(after[0] / before[0] - 1) * 100:+.1f}%), "
                    f"{after[1]} fds ({(after[1] / before[1] - 1) * 100:+.1f}%), {after[2]} connections"
                )
                print(f"providers created: {server.connections_opened} connections opened in all")

                points: list[tuple[int, float]] = [(0, rss_mb(pid))]
                for n in range(1, args.long_runs + 1):
                    runner.run()
                    if n % args.sample_every == 0:
                        points.append((n, rss_mb(pid)))
                if points[-1][0] != args.long_runs:  # --long-runs not a multiple of --sample-every
                    points.append((args.long_runs, rss_mb(pid)))
                settle(server, args.max_providers)
                trend = [p for p in points if p[0] >= min(args.warmup, args.long_runs // 2)]
                if len(trend) < 2:  # too few samples past the warm-up for a slope: use them all
                    trend = points
                print(
                    f"RSS over {args.long_runs} sequential runs: first {points[0][1]:.1f} MB, "
                    f"min {min(y for _, y in points):.1f}, max {max(y for _, y in points):.1f}, "
                    f"last {points[-1][1]:.1f} MB; slope {slope_per_1000(trend):+.2f} MB per 1,000 runs "
                    f"(samples every {args.sample_every} runs from run {trend[0][0]}); "
                    f"{open_fds(pid)} fds, {server.open_connections} connections at the end"
                )
                print("samples (runs: MB): " + ", ".join(f"{x}: {y:.1f}" for x, y in points))
            finally:
                runner.close()


if __name__ == "__main__":
    main()
