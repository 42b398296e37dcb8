"""The engine's diagnostics facade on the real step loop (agentrt.testing.engine fakes): it folds the
whole log for the latest error, reads the row for the lease and the schedule, changes nothing, and
still answers when the log cannot be folded or was pruned."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2
from agentrt.server.api._diagnostics import PENDING_CALL_STATES, diagnostics_to_proto
from agentrt.server.config import AgentConfig
from agentrt.server.core import PendingCallState, Phase
from agentrt.server.engine import _diagnostics as engine_diagnostics
from agentrt.server.engine._diagnostics import diagnose_run
from agentrt.server.store import StoredEvent
from agentrt.server.tools import CallMetadata, ToolOutcome
from agentrt.testing.engine import EngineWorld

ARGS = '{"order_id": "A100"}'


def refund_world(handler: object) -> EngineWorld:
    world = EngineWorld(agent=AgentConfig(tools=["refund.issue"]))
    world.tools.add("refund.issue", handler, side_effect="write")  # type: ignore[arg-type]
    world.models.answer(tool_calls=[("c1", "refund.issue", ARGS)])
    world.models.answer(text="refunded")
    return world


async def test_a_call_in_flight_after_a_retried_failure_shows_its_attempts_and_the_failure() -> None:
    entered, release = asyncio.Event(), asyncio.Event()
    answers = [ToolOutcome.failure("TRANSIENT", "busy")]

    async def flaky(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        if answers:
            return answers.pop(0)
        entered.set()
        await release.wait()
        return ToolOutcome('{"refunded": true}', None)

    world = refund_world(flaky)
    run_id = world.create_run()
    task = world.start(run_id)
    async with asyncio.timeout(5):
        await entered.wait()
    log_before = list(world.log.events[run_id])
    found = await diagnose_run(world.ports(), world.log.runs[run_id])
    assert world.log.events[run_id] == log_before  # reading changes nothing

    assert found.phase is Phase.TOOL_STEP
    assert (found.lease_owner, found.fencing_generation) == ("worker-1", 1)
    (call,) = found.pending_calls
    assert (call.call_id, call.state, call.attempts) == ("c1", PendingCallState.IN_FLIGHT, 2)
    assert call.remote_operation_id == world.tools.calls[0].metadata.idempotency_key
    error = found.last_error
    assert error is not None and error.event_type == "retry.scheduled" and error.call_id == "c1"
    assert "busy" in error.message and error.seq == next(
        e.seq for e in log_before if e.type == "retry.scheduled"
    )
    assert found.reconcile is None and found.log_note == ""

    wire = diagnostics_to_proto(found)
    assert wire.pending_calls[0].state == runtime_service_pb2.PENDING_CALL_STATE_IN_FLIGHT
    assert wire.last_error.event_type == "retry.scheduled" and wire.last_error.HasField("time")
    assert wire.lease_owner == "worker-1" and wire.HasField("lease_expire_time") is (
        world.log.runs[run_id].lease_expires_ms is not None
    )
    assert not wire.HasField("reconcile") and not wire.HasField("wake_time")

    release.set()
    await task
    done = await diagnose_run(world.ports(), world.log.runs[run_id])
    assert done.phase is Phase.COMPLETED and done.pending_calls == () and done.wake_ms == 0
    assert done.last_error is not None and done.last_error.event_type == "retry.scheduled"  # still the latest


async def test_the_latest_fault_is_the_last_error_and_a_tool_failure_spells_its_code_on_the_wire() -> None:
    async def refuses(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        return ToolOutcome.failure("PERMANENT", "no such order")

    world = refund_world(refuses)
    run_id = world.create_run()
    await world.drive(run_id)
    found = await diagnose_run(world.ports(), world.log.runs[run_id])
    assert found.last_error is not None and found.last_error.event_type == "tool.failed"
    assert diagnostics_to_proto(found).last_error.code == "TOOL_ERROR_CODE_PERMANENT"

    world = refund_world(refuses)
    world.fault_plan = type(world.fault_plan)("after_model_response@1=raise")
    world.models.queue.insert(0, world.models.queue[0])
    run_id = world.create_run()
    await world.drive(run_id)
    found = await diagnose_run(world.ports(), world.log.runs[run_id])
    assert found.fault_count == 1 and found.max_faults == world.settings.faults.max_faults
    # The fault came first, the tool's refusal after it: the refusal is the latest.
    assert found.last_error is not None and found.last_error.event_type == "tool.failed"
    faults = [e for e in world.log.events[run_id] if e.type == "run.fault"]
    assert faults and faults[0].seq < found.last_error.seq


async def test_a_log_this_runtime_cannot_fold_still_gets_the_rows_diagnostics() -> None:
    world = refund_world(None)
    run_id = world.create_run()
    bad = StoredEvent(run_id, 1, "tool.completed", json.dumps({"step": 1, "call_id": "nobody"}), 0)
    world.log.events[run_id] = [bad]
    found = await diagnose_run(world.ports(), world.log.runs[run_id])
    assert found.pending_calls == () and found.last_error is None
    assert "cannot be folded" in found.log_note and "nobody" not in found.log_note
    assert diagnostics_to_proto(found).log_note == found.log_note


async def test_a_pruned_run_shows_its_row_and_says_why_nothing_else() -> None:
    world = refund_world(None)
    run_id = world.create_run()
    world.log.runs[run_id] = dataclasses.replace(world.log.runs[run_id], pruned_ms=1_000, fault_count=2)
    world.log.events[run_id] = []
    found = await diagnose_run(world.ports(), world.log.runs[run_id])
    assert found.fault_count == 2 and "pruned by retention" in found.log_note


async def test_a_parked_unknown_outcome_shows_the_reconcile_schedule_and_no_owner() -> None:
    world = refund_world(None)
    run_id = world.create_run()
    record = world.log.runs[run_id]
    world.log.runs[run_id] = dataclasses.replace(
        record,
        phase=Phase.UNKNOWN_OUTCOME.value,
        lease_owner=None,
        lease_expires_ms=None,
        wake_ms=123_000,
        reconcile_attempts=4,
        unknown_call_id="c1",
        cancel_requested_ms=99_000,
        cleanup_status="UNKNOWN",
        cleanups_unknown=1,
        cleanup_due_ms=150_000,
        cleanup_retries=2,
    )
    world.log.events[run_id] = []
    found = await diagnose_run(world.ports(), world.log.runs[run_id])
    assert found.reconcile is not None
    assert (found.reconcile.call_id, found.reconcile.next_attempt_ms, found.reconcile.attempts) == (
        "c1",
        123_000,
        4,
    )
    assert (found.lease_owner, found.lease_expires_ms, found.wake_ms) == ("", 0, 123_000)
    wire = diagnostics_to_proto(found)
    assert wire.phase == run_pb2.RUN_PHASE_UNKNOWN_OUTCOME  # a cancel does not hide the unknown outcome
    assert wire.reconcile.next_attempt_time.ToMilliseconds() == 123_000 and wire.reconcile.attempts == 4
    assert not wire.HasField("lease_expire_time") and wire.cancel_request_time.ToMilliseconds() == 99_000
    assert wire.cleanup_status == run_pb2.CLEANUP_STATUS_UNKNOWN and wire.cleanup_retries == 2
    assert wire.cleanup_due_time.ToMilliseconds() == 150_000 and wire.trace_id == ""


async def test_the_trace_id_comes_from_a_stored_trace_context_once_the_row_has_one() -> None:
    @dataclasses.dataclass(frozen=True)
    class WithTrace:  # the row as it will be once runs.trace_context lands
        record: object
        trace_context: str

        def __getattr__(self, name: str) -> object:
            return getattr(self.record, name)

    world = refund_world(None)
    run_id = world.create_run()
    world.log.events[run_id] = []
    traced = WithTrace(world.log.runs[run_id], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    found = await diagnose_run(world.ports(), traced)  # type: ignore[arg-type]
    assert found.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"


def test_every_pending_call_state_has_its_wire_value_and_back() -> None:
    values = set(runtime_service_pb2.PendingCallState.values()) - {
        runtime_service_pb2.PENDING_CALL_STATE_UNSPECIFIED
    }
    assert set(PENDING_CALL_STATES.values()) == values
    assert len(PENDING_CALL_STATES) == len(PendingCallState)


async def test_events_committed_after_the_row_was_read_are_not_folded() -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    async def gated(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        entered.set()
        await release.wait()
        return ToolOutcome('{"refunded": true}', None)

    world = refund_world(gated)
    run_id = world.create_run()
    task = world.start(run_id)
    async with asyncio.timeout(5):
        await entered.wait()
    row_then = world.log.runs[run_id]  # the row as a diagnosis read it, the call in flight
    release.set()
    await task
    assert world.log.runs[run_id].last_seq > row_then.last_seq  # the log moved on meanwhile
    found = await diagnose_run(world.ports(), row_then)
    (call,) = found.pending_calls  # what the row knew: the call in flight, not its completion
    assert (call.call_id, call.state, call.attempts) == ("c1", PendingCallState.IN_FLIGHT, 1)


async def test_a_long_log_is_folded_off_the_event_loop_with_the_same_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def refuses(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        return ToolOutcome.failure("PERMANENT", "no such order")

    world = refund_world(refuses)
    run_id = world.create_run()
    await world.drive(run_id)
    record = world.log.runs[run_id]
    inline = await diagnose_run(world.ports(), record)
    monkeypatch.setattr(engine_diagnostics, "_FOLD_INLINE_EVENTS", 0)  # every log counts as long
    threaded = await diagnose_run(world.ports(), record)
    assert threaded == inline and threaded.last_error is not None
