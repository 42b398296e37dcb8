"""Contained failures (issue 9, point 4) through a real runtime process and a fake model server.

Before: a model tool call whose arguments were deeply nested JSON crashed the run's driver
on every reclaim, and so did a guardrail hook that raised; each reclaim re-asked the model,
the usage counted none of it, and the run ended EXPIRED ``deadline_exceeded`` at its deadline.
Now: bad JSON is an INVALID_INPUT tool error back to the model, a raising hook ends the run
``guardrail_error:<class>`` at once, and any other exception is a ``run.fault``; the third
ends the run FAILED ``internal_error:<class>`` within seconds, with every model call counted.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentrt.client import Client, event_type
from agentrt.plugins.demo_tools import count_refunds
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import ToolHostProcess
from tests.fault.conftest import (
    REFUND_SCRIPT,
    FakeOpenAI,
    runtime_env,
    serve_fake_openai,
    start_runtime,
)
from tests.fault.test_crash_points import CRASH_POINTS, check_log, reasked_step

DEEP_ARGUMENTS = '{"order_id": ' + "[" * 5000 + "]" * 5000 + "}"
TIMEOUT_S = 60  # the run's deadline: every ending here must come long before it


def _events(address: str, run_id: str) -> tuple[list[run_pb2.RunEvent], run_pb2.Run]:
    with Client(address) as client:
        events = [e for e in client.stream_events(run_id, follow=True, timeout=TIMEOUT_S) if e.seq]
        run = client.get_run(run_id)
    assert events and event_type(events[-1]) == "run.ended", [event_type(e) for e in events]
    return events, run


def _start(address: str) -> tuple[str, float]:
    with Client(address) as client:
        return client.start_run("refund", "Please refund A100").run_id, time.monotonic()


def _of(events: list[run_pb2.RunEvent], kind: str) -> list[Any]:
    return [getattr(e, kind) for e in events if e.HasField(kind)]


@pytest.fixture
def base(refund_host: ToolHostProcess, sqlite_url: str) -> dict[str, str]:
    return {"db_url": sqlite_url, "tool_host": refund_host.address}


@pytest.fixture
def served(request: pytest.FixtureRequest) -> Iterator[tuple[FakeOpenAI, str]]:
    with serve_fake_openai(getattr(request, "param", REFUND_SCRIPT)) as pair:
        yield pair


DEEP_SCRIPT = {
    1: {"tool": "orders.lookup", "arguments_json": DEEP_ARGUMENTS},
    2: {"tool": "orders.lookup", "arguments": {"order_id": "A100"}},
    3: {"text": "A100 is a broken kettle."},
}


@pytest.mark.parametrize("served", [DEEP_SCRIPT], indirect=True)
def test_deeply_nested_tool_arguments_are_invalid_input_and_the_run_completes(
    tmp_path: Path, base: dict[str, str], served: tuple[FakeOpenAI, str]
) -> None:
    fake, url = served
    runtime = start_runtime(tmp_path, runtime_env(**base, model_url=url, timeout_s=TIMEOUT_S))
    try:
        run_id, _ = _start(runtime.address)
        events, run = _events(runtime.address, run_id)
    finally:
        runtime.close()
    assert run.phase == run_pb2.RUN_PHASE_COMPLETED, [event_type(e) for e in events]
    assert run.output == "A100 is a broken kettle." and run.fault_count == 0
    refused = _of(events, "tool_failed")
    assert [(f.call_id, f.error.code) for f in refused] == [("call_1", 1)]  # TOOL_ERROR_CODE_INVALID_INPUT
    assert "deeper than 64 levels" in refused[0].error.message
    assert len(refused[0].error.message) < 200  # the arguments are never echoed
    # Never started, never sent: the only call that ran is the well-formed one.
    assert [s.call_id for s in _of(events, "tool_started")] == ["call_2"]
    # The model heard why, in the tool message of its next request.
    told = [m for m in fake.bodies[1]["messages"] if m["role"] == "tool"]
    assert told and '"error": "INVALID_INPUT"' in told[0]["content"]  # the core's word for the code
    assert "deeper than 64" in told[0]["content"]
    assert not _of(events, "run_fault")
    assert run.usage.model_steps == len(fake.requests) == 3


def test_a_guardrail_that_raises_is_guardrail_error_at_once(
    tmp_path: Path, base: dict[str, str], served: tuple[FakeOpenAI, str]
) -> None:
    fake, url = served
    env = runtime_env(**base, model_url=url, timeout_s=TIMEOUT_S)
    agents = json.loads(env["AGENTRT_AGENTS"])
    # A misconfigured option makes the shipped output guardrail raise TypeError (not reject).
    agents["refund"]["output"] = {"on_failure": "correct", "options": {"forbidden_phrases": 5}}
    env["AGENTRT_AGENTS"] = json.dumps(agents)
    runtime = start_runtime(tmp_path, env)
    try:
        run_id, began = _start(runtime.address)
        events, run = _events(runtime.address, run_id)
        took = time.monotonic() - began
    finally:
        runtime.close()
    ended = events[-1].run_ended
    assert ended.phase == run_pb2.RUN_PHASE_FAILED and ended.reason == "guardrail_error:TypeError"
    assert not ended.retryable
    failed = _of(events, "run_failed")[0]
    assert "output guardrail hook" in failed.message and failed.message.startswith("TypeError")
    assert took < 20, took  # not at the deadline
    # No corrective step and no retry: the model was asked for the three steps once each.
    assert len(fake.requests) == 3 == run.usage.model_steps
    assert not [s for s in _of(events, "step_started") if s.kind == run_pb2.STEP_KIND_CORRECTIVE]
    assert not _of(events, "run_fault") and run.fault_count == 0


def test_three_faults_end_the_run_failed_within_seconds_counting_every_model_call(
    tmp_path: Path, refund_host: ToolHostProcess, db_url: str, served: tuple[FakeOpenAI, str]
) -> None:
    """On both stores: run.fault and runs.fault_count are written in one fenced transaction."""
    fake, url = served
    base = {"db_url": db_url, "tool_host": refund_host.address}
    env = runtime_env(**base, model_url=url, timeout_s=TIMEOUT_S, fault="after_model_response@1..=raise")
    runtime = start_runtime(tmp_path, env)
    try:
        run_id, began = _start(runtime.address)
        events, run = _events(runtime.address, run_id)
        took = time.monotonic() - began
        assert runtime.process.poll() is None  # contained: the process lives on
        counters = runtime.counters()  # scraped while it serves
        runtime.stop()
    finally:
        runtime.close()
    # Each fault was recorded and retried by this worker, not left to a lease expiry and reclaim.
    assert counters["run_fault_count"] == 3 and counters["lease_lost_count"] == 0
    ended = events[-1].run_ended
    assert ended.phase == run_pb2.RUN_PHASE_FAILED, [event_type(e) for e in events]
    assert ended.reason == "internal_error:InjectedFault" and run.reason == ended.reason
    assert not ended.retryable  # a bug, not the environment: the same run would fault again
    assert took < 15, took  # within seconds, not at the 60 s deadline
    faults = _of(events, "run_fault")
    assert [(f.fault_count, f.max_faults, f.error_class) for f in faults] == [
        (1, 3, "InjectedFault"),
        (2, 3, "InjectedFault"),
        (3, 3, "InjectedFault"),
    ]
    assert all(f.usage_spent.model_steps == 1 and f.usage_spent.input_tokens == 10 for f in faults)
    assert [f.usage_after.model_steps for f in faults] == [1, 2, 3]
    assert "_faults.py" in faults[0].message and len(faults[0].message) <= 300
    # Every model call made is in the usage, and GetRun shows the persisted fault count.
    assert len(fake.requests) == 3
    assert run.usage.model_steps == ended.usage.model_steps == 3
    assert run.usage.input_tokens == 30 and run.fault_count == 3
    assert not _of(events, "model_completed")


def test_a_single_transient_fault_is_recorded_and_the_run_completes(
    tmp_path: Path, base: dict[str, str], refund_host: ToolHostProcess, served: tuple[FakeOpenAI, str]
) -> None:
    fake, url = served
    env = runtime_env(**base, model_url=url, timeout_s=TIMEOUT_S, fault="after_model_response@2=raise")
    runtime = start_runtime(tmp_path, env)
    try:
        run_id, _ = _start(runtime.address)
        events, run = _events(runtime.address, run_id)
        counters = runtime.counters()  # scraped while it serves
        runtime.stop()
    finally:
        runtime.close()
    assert run.phase == run_pb2.RUN_PHASE_COMPLETED and run.output == "Refunded 30.00 for A100."
    assert counters["run_fault_count"] == 1
    faults = _of(events, "run_fault")
    assert len(faults) == 1 and faults[0].fault_count == 1
    assert faults[0].step == _of(events, "model_completed")[1].step  # the refund step's model call
    assert faults[0].usage_spent.model_steps == 1
    check_log(events)
    # Step 2 was asked twice (the answer of the faulted attempt was never stored): four calls, all counted.
    assert [s for _, s in fake.requests] == [1, 2, 2, 3]
    assert run.usage.model_steps == 4 and run.fault_count == 1
    assert count_refunds(refund_host.data_dir / "refunds.sqlite") == 1


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_an_exception_at_any_commit_point_is_contained_exactly_once(
    point: str,
    tmp_path: Path,
    refund_host: ToolHostProcess,
    served: tuple[FakeOpenAI, str],
    sqlite_url: str,
) -> None:
    """The crash suite's points, raising in the driver instead of killing the process."""
    fake, url = served
    env = runtime_env(db_url=sqlite_url, tool_host=refund_host.address, model_url=url, fault=f"{point}=raise")
    runtime = start_runtime(tmp_path, env)
    try:
        run_id, began = _start(runtime.address)
        events, run = _events(runtime.address, run_id)
        took = time.monotonic() - began
        counters = runtime.counters()  # scraped while it serves
        runtime.stop()
    finally:
        runtime.close()
    assert run.phase == run_pb2.RUN_PHASE_COMPLETED, [event_type(e) for e in events]
    assert run.output == "Refunded 30.00 for A100."
    check_log(events)
    assert count_refunds(refund_host.data_dir / "refunds.sqlite") == 1
    faults = _of(events, "run_fault")
    # After the closing commit there is nothing left to retry: the fault is only logged.
    assert len(faults) == (0 if point == "after_commit:run.ended" else 1)
    assert run.fault_count == len(faults) == counters["run_fault_count"]
    assert took < 30, took
    # A fault before the commit of a step's answer loses it: that step was asked again, with the
    # same conversation, and the lost answer is counted (run.fault) like every model call made.
    asked = Counter(step for _, step in fake.requests)
    reasked = reasked_step(point)
    assert asked == {1: 1, 2: 1, 3: 1} | ({reasked: 2} if reasked else {}), (point, asked)
    assert run.usage.model_steps == len(fake.requests)


NUL_SCRIPT = {1: {"text": "A100\x00 is a broken kettle."}}


@pytest.mark.parametrize("served", [NUL_SCRIPT], indirect=True)
def test_a_model_answer_with_nul_characters_completes_on_every_store(
    tmp_path: Path, refund_host: ToolHostProcess, db_url: str, served: tuple[FakeOpenAI, str]
) -> None:
    # PostgreSQL refuses NUL in text columns: the answer must not turn into faults there.
    _, url = served
    runtime = start_runtime(
        tmp_path,
        runtime_env(db_url=db_url, tool_host=refund_host.address, model_url=url, timeout_s=TIMEOUT_S),
    )
    try:
        run_id, _ = _start(runtime.address)
        events, run = _events(runtime.address, run_id)
    finally:
        runtime.close()
    assert run.phase == run_pb2.RUN_PHASE_COMPLETED and run.fault_count == 0, [event_type(e) for e in events]
    assert run.output == "A100\ufffd is a broken kettle."
    assert _of(events, "run_completed")[0].output == "A100\x00 is a broken kettle."
