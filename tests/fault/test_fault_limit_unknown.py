"""The fault limit reached with a write in flight, through a real runtime process, tool host and
fake model server: the run goes to UNKNOWN_OUTCOME (never FAILED), escalates like any unknown
outcome, and settles through the reconcile path once the tool host's ledger answers; an end made
from the row lists what the run did.

The refund's result is recorded by a commit that carries its tool.completed: fault injection
makes that commit raise (a bug) on its first three tries, the refund having landed in the tool's
real store each time the runtime got to record it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from agentrt.client import Client, event_type
from agentrt.plugins.demo_tools import count_refunds
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import ToolHostProcess
from tests.fault.conftest import FakeOpenAI, runtime_env, start_runtime

TIMEOUT_S = 60
COMPLETED = run_pb2.RUN_PHASE_COMPLETED


def _of(events: list[run_pb2.RunEvent], kind: str) -> list[Any]:
    return [getattr(e, kind) for e in events if e.HasField(kind)]


def test_the_fault_limit_with_a_write_in_flight_parks_it_unknown_until_its_ledger_answers(
    tmp_path: Path, refund_host: ToolHostProcess, fake_model: tuple[FakeOpenAI, str], sqlite_url: str
) -> None:
    _, url = fake_model
    env = runtime_env(
        db_url=sqlite_url,
        tool_host=refund_host.address,
        model_url=url,
        # The lookup's result is tool.completed's first commit; the refund's are the 2nd to 4th.
        fault="before_commit:tool.completed@2..4=raise",
        timeout_s=TIMEOUT_S,
        reconcile__base_s=30.0,  # the first ledger query would come late...
        escalation__unknown_outcome_after_s=1.0,  # ...but the wait needs a person after 1 s
    )
    runtime = start_runtime(tmp_path, env)
    try:
        with Client(runtime.address) as client:
            run_id = client.start_run("refund", "Please refund A100").run_id
            parked = _poll(
                client, run_id, lambda r: r.fault_count == 3 or r.phase == run_pb2.RUN_PHASE_COMPLETED
            )
            events = [e for e in client.stream_events(run_id, follow=True, timeout=TIMEOUT_S) if e.seq]
            run = client.get_run(run_id)
        counters = runtime.counters()  # scraped while it serves
        runtime.stop()
    finally:
        runtime.close()
    # At the limit the run waited in UNKNOWN_OUTCOME for its ledger; it never failed.
    assert parked.phase == run_pb2.RUN_PHASE_UNKNOWN_OUTCOME, run_pb2.RunPhase.Name(parked.phase)
    types = [event_type(e) for e in events]
    assert "run.failed" not in types
    faults = _of(events, "run_fault")
    assert [f.fault_count for f in faults] == [1, 2, 3]
    third = types.index("run.fault", types.index("run.fault", types.index("run.fault") + 1) + 1)
    assert types[third + 1] == "tool.outcome.unknown"  # committed with the third fault
    (unknown,) = _of(events, "tool_outcome_unknown")
    refund_call = _of(events, "tool_started")[-1].call_id
    assert unknown.call_id == refund_call
    # Escalated like any other unknown outcome, then settled by the ledger's answer.
    (escalated,) = _of(events, "run_escalated")
    assert escalated.reason == "unknown_outcome_age" and escalated.call_id == refund_call
    settled = [c for c in _of(events, "tool_completed") if c.call_id == refund_call]
    assert len(settled) == 1 and settled[0].replayed
    assert run.phase == run_pb2.RUN_PHASE_COMPLETED and run.output == "Refunded 30.00 for A100."
    assert run.fault_count == 3 and not run.needs_attention  # settled: nobody needs to look any more
    assert count_refunds(refund_host.data_dir / "refunds.sqlite") == 1  # never sent twice
    assert counters["unknown_result_count"] == 1 and counters["escalated_count"] == 1


def test_the_fault_limit_with_no_write_in_flight_ends_failed_listing_the_runs_calls(
    tmp_path: Path, refund_host: ToolHostProcess, fake_model: tuple[FakeOpenAI, str], sqlite_url: str
) -> None:
    _, url = fake_model
    env = runtime_env(
        db_url=sqlite_url,
        tool_host=refund_host.address,
        model_url=url,
        fault="after_model_response@2..=raise",  # the refund step's model answer, every time
        timeout_s=TIMEOUT_S,
    )
    runtime = start_runtime(tmp_path, env)
    try:
        with Client(runtime.address) as client:
            run_id = client.start_run("refund", "Please refund A100").run_id
            events = [e for e in client.stream_events(run_id, follow=True, timeout=TIMEOUT_S) if e.seq]
            run = client.get_run(run_id)
    finally:
        runtime.close()
    ended = events[-1].run_ended
    assert ended.phase == run_pb2.RUN_PHASE_FAILED and ended.reason == "internal_error:InjectedFault"
    assert ended.partial
    # The lookup ran and completed: the end says so (before, a bare row gave empty lists).
    lookup = _of(events, "tool_started")[0].call_id
    assert [c.call_id for c in ended.completed_calls] == [lookup]
    assert [c.tool for c in ended.completed_calls] == ["orders.lookup"]
    assert not ended.unknown_calls
    assert [c.call_id for c in run.completed_calls] == [lookup]  # GetRun reads the same summary
    assert count_refunds(refund_host.data_dir / "refunds.sqlite") == 0


def _poll(client: Client, run_id: str, done: Any, timeout_s: float = 30.0) -> run_pb2.Run:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = client.get_run(run_id)
        if done(run):
            return run
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} did not get there within {timeout_s}s")
