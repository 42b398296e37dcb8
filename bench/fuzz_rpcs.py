"""The RPC fuzz of tests/fuzz, run longer: hostile messages to every RPC of both services.

Starts the same secured runtime and tool host (real processes, SQLite) as the test, sends
``--examples`` hypothesis examples per RPC (seeded by ``--seed``, so a run can be repeated),
optionally the deterministic edge-value sweep (``--sweep``), and checks the four invariants
after every example. Nothing stops at the first failure: every broken invariant is collected.

Prints examples run per RPC, a histogram of status codes (overall and per RPC), the count of
INTERNAL/UNKNOWN statuses (must be 0), and the distinct findings. Exits 1 when there is any.

Run: ``python bench/fuzz_rpcs.py --examples 500 --seed 1`` (``--rpcs StartRun,ListRuns``).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.fuzz.findings import Finding, report  # noqa: E402
from tests.fuzz.harness import HOST_RPCS, RUNTIME_RPCS, FuzzStack, fuzz_stack  # noqa: E402
from tests.fuzz.sweep import host_cases, message_cases, runtime_baselines  # noqa: E402
from tests.fuzz.test_rpc_fuzz import HOST_STRATEGIES, RUNTIME_STRATEGIES  # noqa: E402


def fuzz(stack: FuzzStack, rpc: str, *, examples: int, seed_value: int) -> None:
    """``examples`` generated requests to ``rpc``; findings go to the stack's tally."""
    strategy: st.SearchStrategy[Any] = (
        HOST_STRATEGIES[rpc] if rpc in HOST_STRATEGIES else RUNTIME_STRATEGIES[rpc](stack.targets)
    )

    @seed(seed_value)
    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        phases=(Phase.generate,),
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        stack.run_example(rpc, data.draw(strategy))

    run()


def sweep(stack: FuzzStack, rpcs: list[str]) -> None:
    for make in runtime_baselines(stack.targets).values():
        rpc, base, skip = make()
        if rpc in rpcs:
            for _, request in message_cases(base, skip=skip):
                stack.run_example(rpc, request)
    for rpc in HOST_RPCS:
        if rpc in rpcs:
            for _, call in host_cases(rpc):
                stack.run_example(rpc, call)


def distinct(findings: list[Finding]) -> dict[tuple[str, str], tuple[Finding, int]]:
    """Findings grouped by RPC and first problem, with ids and numbers folded.

    Once a stored run cannot be read back, every later example also reports the tenant's own
    ListRuns failing; that problem counts only where it is the example's sole one.
    """
    groups: dict[tuple[str, str], tuple[Finding, int]] = {}
    for finding in findings:
        own = [p for p in finding.problems if not p.startswith("fuzz tenant's own ListRuns")]
        first = re.sub(r"[0-9a-f]{32}|\d+", "#", (own or finding.problems)[0])[:160]
        key = (finding.rpc, first)
        seen, count = groups.get(key, (finding, 0))
        groups[key] = (seen, count + 1)
    return groups


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--examples", type=int, default=200, help="generated examples per RPC (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed (default 0)")
    parser.add_argument(
        "--rpcs", default="", help="comma-separated RPC names (default: all of both services)"
    )
    parser.add_argument("--sweep", action="store_true", help="also run the per-field edge-value sweep")
    args = parser.parse_args()
    rpcs = [r for r in args.rpcs.split(",") if r] or [*RUNTIME_RPCS, *HOST_RPCS]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="agentrt-fuzz-") as tmp, fuzz_stack(Path(tmp)) as stack:
        for rpc in rpcs:
            fuzz(stack, rpc, examples=args.examples, seed_value=args.seed)
            print(f"{rpc:16} {stack.tally.examples[rpc]:6} examples", flush=True)
        if args.sweep:
            sweep(stack, rpcs)
        tally = stack.tally
    elapsed = time.monotonic() - started
    print(f"\nexamples run: {sum(tally.examples.values())} in {elapsed:.0f}s (seed {args.seed})")
    for rpc in rpcs:
        codes = ", ".join(f"{code} {n}" for (r, code), n in sorted(tally.by_rpc.items()) if r == rpc)
        print(f"  {rpc:16} {tally.examples[rpc]:6}  {codes}")
    print("status codes:")
    for code, n in tally.codes.most_common():
        print(f"  {code:20} {n:6}")
    print(f"INTERNAL/UNKNOWN statuses: {tally.broken} (must be 0)")
    groups = distinct(tally.findings)
    print(f"examples breaking an invariant: {len(tally.findings)}; distinct findings: {len(groups)}")
    for finding, count in groups.values():
        print(f"\n[{count}x] {report(finding)}")
    return 1 if tally.findings else 0


if __name__ == "__main__":
    sys.exit(main())
