"""Hostile messages to every RPC of both services, against real processes (issue 9, point 8).

After every example: no INTERNAL or UNKNOWN, both processes SERVING, a refused call wrote
nothing, and another tenant's ListRuns and GetRun still work (see tests/fuzz/harness.py).

``AGENTRT_FUZZ_EXAMPLES`` sets the examples per RPC (default CI-sized); runs are derandomized
(the same examples every time) unless ``AGENTRT_FUZZ_SEED`` picks a seed. ``bench/fuzz_rpcs.py``
runs the same harness longer.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.fuzz import strategies as s
from tests.fuzz.findings import describe, report
from tests.fuzz.harness import FuzzStack
from tests.fuzz.strategies import Targets
from tests.fuzz.sweep import host_cases, message_cases, runtime_baselines

EXAMPLES = int(os.environ.get("AGENTRT_FUZZ_EXAMPLES", "25"))
SEED = os.environ.get("AGENTRT_FUZZ_SEED", "")

FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=not SEED,
    database=None,
    deadline=None,
    # Shrinking re-runs real RPCs many times; the harness prints every failing example clipped.
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)

RUNTIME_STRATEGIES: dict[str, Callable[[s.Targets], st.SearchStrategy[Any]]] = {
    "RunAgent": s.run_agent_requests,
    "StartRun": s.start_run_requests,
    "GetRun": s.get_run_requests,
    "ListRuns": s.list_runs_requests,
    "StreamRunEvents": s.stream_run_events_requests,
    "CancelRun": s.cancel_run_requests,
    "ResolveApproval": s.resolve_approval_requests,
    "ResolveOutcome": s.resolve_outcome_requests,
    "GetPayload": s.get_payload_requests,
    "GetRunDiagnostics": s.get_run_diagnostics_requests,
}
HOST_STRATEGIES: dict[str, st.SearchStrategy[s.HostCall]] = {
    "ListTools": s.list_tools_calls(),
    "InvokeTool": s.invoke_tool_calls(),
    "GetOperation": s.get_operation_calls(),
    "PreviewTool": s.preview_tool_calls(),
    "CancelOperation": s.cancel_operation_calls(),
}


class Shown:
    """A drawn request whose repr is clipped: hypothesis prints it when an example fails."""

    def __init__(self, message: Any) -> None:
        self.message = message

    def __repr__(self) -> str:
        return describe(self.message)


def _seeded(test: Callable[..., None]) -> Callable[..., None]:
    from hypothesis import seed

    return seed(int(SEED))(test) if SEED else test


def check(stack: FuzzStack, rpc: str, request: Any) -> None:
    problems = stack.run_example(rpc, request)
    assert not problems, report(stack.tally.findings[-1])


@pytest.mark.parametrize("rpc", list(RUNTIME_STRATEGIES))
def test_runtime_rpc_survives_hostile_messages(stack: FuzzStack, rpc: str) -> None:
    @_seeded
    @FUZZ_SETTINGS
    @given(data=st.data())
    def fuzz(data: st.DataObject) -> None:
        shown = data.draw(RUNTIME_STRATEGIES[rpc](stack.targets).map(Shown), label=rpc)
        check(stack, rpc, shown.message)

    fuzz()


@pytest.mark.parametrize("rpc", list(HOST_STRATEGIES))
def test_tool_host_rpc_survives_hostile_messages(stack: FuzzStack, rpc: str) -> None:
    @_seeded
    @FUZZ_SETTINGS
    @given(shown=HOST_STRATEGIES[rpc].map(Shown))
    def fuzz(shown: Shown) -> None:
        check(stack, rpc, shown.message)

    fuzz()


def _sweep(stack: FuzzStack, cases: list[tuple[str, str, Any]]) -> None:
    failures = []
    for label, rpc, request in cases:
        if stack.run_example(rpc, request):
            failures.append(f"[{label}]\n{report(stack.tally.findings[-1])}")
    assert not failures, f"{len(failures)} of {len(cases)} cases broke an invariant:\n" + "\n".join(failures)


@pytest.mark.parametrize("sweep", list(runtime_baselines(Targets())))
def test_runtime_rpc_edge_value_sweep(stack: FuzzStack, sweep: str) -> None:
    rpc, base, skip = runtime_baselines(stack.targets)[sweep]()
    _sweep(stack, [(label, rpc, request) for label, request in message_cases(base, skip=skip)])


@pytest.mark.parametrize("rpc", list(HOST_STRATEGIES))
def test_tool_host_rpc_edge_value_sweep(stack: FuzzStack, rpc: str) -> None:
    _sweep(stack, [(label, rpc, call) for label, call in host_cases(rpc)])
