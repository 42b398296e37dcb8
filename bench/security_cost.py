"""What the trust boundary costs per step: the step-loop workload with security off and on.

Off: plaintext everywhere, loopback trust, no call grants. On: the runtime API over TLS with a
bearer token checked on every call, mTLS from the runtime to the tool host, and a call grant
signed by the runtime and verified by the host on every tool call (optionally ``--encrypt``:
payloads sealed at rest too). Same scripted agent as ``step_loop.py`` (K no-op tool calls in a
real tool host process), SQLite, one run of each in this process so the two figures share the
machine's state.

Run: ``python bench/security_cost.py`` (``--runs 200 --concurrent 100``). Prints figures; asserts
nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _workload import STEPS_PER_RUN, measure, peak_rss_mb, serving  # noqa: E402


@dataclass(frozen=True)
class Result:
    per_step_ms: float
    p50_ms: float
    p99_ms: float
    steps_per_s: float
    rss_mb: float


def bench(work: Path, args: argparse.Namespace, *, secure: bool) -> Result:
    name = "on" if secure else "off"
    # Off means no grants at all, not grants signed for a host that ignores them.
    extra_env = {} if secure else {"AGENTRT_GRANTS__ENABLED": "false"}
    encrypt = secure and args.encrypt
    with serving(
        f"sqlite:///{work / f'bench-{name}.sqlite'}",
        work,
        encrypt=encrypt,
        secure=secure,
        extra_env=extra_env,
    ) as stack:
        sequential, bursts = asyncio.run(measure(stack, args.runs, args.concurrent, args.bursts))
        rss = peak_rss_mb(stack.runtime_pid)
    ordered = sorted(sequential)
    return Result(
        per_step_ms=statistics.mean(sequential) / STEPS_PER_RUN * 1000,
        p50_ms=statistics.median(ordered) * 1000,
        p99_ms=ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
        steps_per_s=statistics.median(args.concurrent * STEPS_PER_RUN / seconds for seconds in bursts),
        rss_mb=rss,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--concurrent", type=int, default=100)
    parser.add_argument("--bursts", type=int, default=3, help="concurrent bursts (the median rate counts)")
    parser.add_argument("--encrypt", action="store_true", help="also seal payloads at rest when on")
    args = parser.parse_args()
    print(
        f"agentrt security cost: SQLite, {STEPS_PER_RUN} steps per run, {args.runs} sequential runs, "
        f"{args.concurrent} concurrent, {os.cpu_count()} cores"
    )
    with tempfile.TemporaryDirectory(prefix="agentrt-bench-sec-") as tmp:
        off = bench(Path(tmp), args, secure=False)
        on = bench(Path(tmp), args, secure=True)
    label = "TLS+token auth, mTLS+grants" + (", encryption at rest" if args.encrypt else "")
    print(f"{'':32} {'off':>10} {'on':>10} {'on/off':>8}")
    for title, a, b in (
        ("per step, sequential (ms)", off.per_step_ms, on.per_step_ms),
        ("run p50 (ms)", off.p50_ms, on.p50_ms),
        ("run p99 (ms)", off.p99_ms, on.p99_ms),
        ("steps/s, concurrent", off.steps_per_s, on.steps_per_s),
        ("runtime peak RSS (MB)", off.rss_mb, on.rss_mb),
    ):
        print(f"{title:32} {a:10.3f} {b:10.3f} {b / a:8.2f}")
    print(f"on = {label}")


if __name__ == "__main__":
    main()
