"""Checkpoints (R5.1, R5.6): checkpoint + tail equals a full replay, whatever the log's shape.

The logs come from real runs of the engine on in-process fakes (``agentrt.testing.engine``):
tool steps with retries, a parallel batch, an approval wait, an unknown outcome settled late, a
corrective step, a diagnostic step, a large input held as a payload. For every split point of
every log, the state restored from a checkpoint of the prefix and folded with the rest must equal
the replay of the whole log. Then the engine: checkpoints are written every N events, a resume
reads the latest plus the tail, and a corrupted, foreign or too-new checkpoint falls back to a
full replay.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable

import pytest

from agentrt.server.config import AgentConfig, ApprovalsConfig, CheckpointsConfig, OutputConfig, Settings
from agentrt.server.core import (
    CHECKPOINT_UPGRADERS,
    STATE_VERSION,
    CheckpointUnusable,
    RunState,
    checkpoint_text,
    replay,
    restore_checkpoint,
)
from agentrt.server.core import events as ev
from agentrt.server.core._checkpoint import _decoder as checkpoint_decoder
from agentrt.server.store import StoredCheckpoint, decode_event
from agentrt.server.tools import CallMetadata, ToolOutcome
from agentrt.testing.engine import Crashed, EngineWorld

Handler = Callable[[str, CallMetadata], Awaitable[ToolOutcome]]


def ok(result: dict[str, object]) -> Handler:
    async def handler(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        return ToolOutcome(json.dumps(result), None)

    return handler


def settings(every: int = 0) -> Settings:
    return Settings(retry_base_s=0.01, retry_cap_s=0.05, checkpoints=CheckpointsConfig(every_events=every))


def events_of(world: EngineWorld, run_id: str) -> list[ev.Event]:
    return [decode_event(e.type, e.payload) for e in world.log.events[run_id]]


# -- logs of many shapes ----------------------------------------------------------------------------


async def tools_with_retry_and_batch() -> tuple[EngineWorld, str]:
    answers = [ToolOutcome.failure("TRANSIENT", "busy"), ToolOutcome('{"refunded": true}', None)]

    async def flaky(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        return answers.pop(0)

    agent = AgentConfig(tools=["refund.issue", "orders.lookup"])
    agent = agent.model_copy(
        update={"budgets": agent.budgets.model_copy(update={"max_parallel_tool_calls": 2})}
    )
    world = EngineWorld(agent=agent, settings=settings())
    world.tools.add("refund.issue", flaky)
    world.tools.add("orders.lookup", ok({"status": "shipped"}), side_effect="read", concurrency_safe=True)
    world.models.answer(
        tool_calls=[("c1", "orders.lookup", '{"id": 1}'), ("c2", "orders.lookup", '{"id": 2}')]
    )
    world.models.answer(tool_calls=[("c3", "refund.issue", '{"order_id": "A1"}')])
    world.models.answer(text="done")
    run_id = world.create_run("refund A1 and look up two orders")
    await world.drive(run_id)
    return world, run_id


async def approval_wait_then_approved() -> tuple[EngineWorld, str]:
    world = EngineWorld(
        agent=AgentConfig(tools=["refund.issue"], approvals=ApprovalsConfig(timeout_s=600)),
        settings=settings(),
    )
    world.tools.add("refund.issue", ok({"refunded": True}), requires_approval=True)
    world.models.answer(tool_calls=[("c1", "refund.issue", '{"order_id": "A1"}')])
    world.models.answer(text="refunded")
    run_id = world.create_run()
    await world.drive(run_id)
    (asked,) = world.log.payloads(run_id, "approval.requested")
    decision = {"approval_id": asked["approval_id"], "decision": "APPROVAL_DECISION_APPROVE", "approver": "a"}
    world.log.add_signal(run_id, "approval_decision", decision)
    world.take_over(run_id, "worker-2")
    await world.drive(run_id)
    return world, run_id


async def unknown_outcome_settled_late() -> tuple[EngineWorld, str]:
    entered, release = asyncio.Event(), asyncio.Event()

    async def gated(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        entered.set()
        await release.wait()
        return ToolOutcome('{"refunded": true}', None)

    world = EngineWorld(agent=AgentConfig(tools=["refund.issue"]), settings=settings())
    world.tools.add("refund.issue", gated)
    world.models.answer(tool_calls=[("c1", "refund.issue", '{"order_id": "A1"}')])
    world.models.answer(text="refunded")
    run_id = world.create_run()
    task = world.start(run_id)
    async with asyncio.timeout(5):
        await entered.wait()
    await world.crash(task)
    key = world.tools.calls[0].metadata.idempotency_key
    world.tools.ledger[key] = "running"
    world.take_over(run_id, "worker-2")
    await world.drive(run_id)  # parks in UNKNOWN_OUTCOME
    world.tools.ledger[key] = ToolOutcome('{"late": true}', None)
    world.take_over(run_id, "worker-3")
    await world.drive(run_id)
    return world, run_id


async def diagnostic_step() -> tuple[EngineWorld, str]:
    world = EngineWorld(agent=AgentConfig(tools=["orders.lookup"]), settings=settings())
    world.tools.add("orders.lookup", ok({"status": "x"}), side_effect="read")
    for _ in range(3):  # the same call three times: a loop, and its one diagnostic step
        world.models.answer(tool_calls=[("c", "orders.lookup", '{"id": 1}')])
    world.models.answer(text="stuck on orders.lookup")
    run_id = world.create_run()
    await world.drive(run_id)
    assert [p["kind"] for p in world.log.payloads(run_id, "step.started")][-1] == "diagnostic"
    return world, run_id


async def corrective_step() -> tuple[EngineWorld, str]:
    output = OutputConfig(schema={"type": "object", "required": ["ok"]}, on_failure="correct")
    world = EngineWorld(agent=AgentConfig(output=output), settings=settings())
    world.models.answer(text="not json")
    world.models.answer(text='{"ok": true}')
    run_id = world.create_run()
    await world.drive(run_id)
    assert [p["kind"] for p in world.log.payloads(run_id, "step.started")] == ["model", "corrective"]
    assert world.log.phase(run_id) == "COMPLETED"
    return world, run_id


async def large_input_as_payload() -> tuple[EngineWorld, str]:
    world = EngineWorld(agent=AgentConfig(), settings=settings())
    world.models.answer(text="read it")
    run_id = world.create_run("x")
    # The input is a payload: run.started holds its view, the model sees it whole (hydrated).
    whole = "big input " * 20_000
    ref = await world.payloads.put(
        run_id=run_id, tenant_id="default", kind="input", media_type="text/plain", text=whole, now_ms=0
    )
    started = world.log.events[run_id][0]
    payload = json.loads(started.payload)
    payload.update(input="big input (view)", input_ref=ref.to_json())
    world.log.events[run_id][0] = dataclasses.replace(started, payload=json.dumps(payload))
    await world.drive(run_id)
    assert world.models.requests[0].messages[-1].content == whole
    return world, run_id


SHAPES = [
    tools_with_retry_and_batch,
    approval_wait_then_approved,
    unknown_outcome_settled_late,
    diagnostic_step,
    corrective_step,
    large_input_as_payload,
]


@pytest.mark.parametrize("shape", SHAPES, ids=[s.__name__ for s in SHAPES])
async def test_checkpoint_plus_tail_equals_a_full_replay_at_every_split(
    shape: Callable[[], Awaitable[tuple[EngineWorld, str]]],
) -> None:
    world, run_id = await shape()
    events = events_of(world, run_id)
    whole = replay(run_id, events)
    phases = set()
    for split in range(1, len(events) + 1):
        prefix = replay(run_id, events[:split])
        phases.add(prefix.phase)
        text = checkpoint_text(prefix, runtime_version="t", agent_config_hash="h")
        restored = restore_checkpoint(
            text, state_version=STATE_VERSION, run_id=run_id, through_seq=split, agent_config_hash="h"
        )
        assert restored == prefix
        for event in events[split:]:
            restored.apply(event)
            restored.seq += 1
        assert restored == whole, f"split at {split}"
    assert len(phases) >= 3  # the splits fall in several phases (tool steps, waits, ...)


async def test_the_logs_cover_waits_and_unknown_outcomes() -> None:
    _, _ = await approval_wait_then_approved()
    world, run_id = await unknown_outcome_settled_late()
    phases = {replay(run_id, events_of(world, run_id)[:n]).phase.value for n in range(1, 12)}
    assert "UNKNOWN_OUTCOME" in phases
    world, run_id = await approval_wait_then_approved()
    phases = {replay(run_id, events_of(world, run_id)[:n]).phase.value for n in range(1, 8)}
    assert "WAITING_APPROVAL" in phases


def test_a_hydrated_input_is_checkpointed_as_the_view_the_log_holds() -> None:
    state = RunState(run_id="r")
    ref = ev.PayloadRef(payload_id="p", size_bytes=9, sha256="s", preview="v", media_type="text/plain")
    state.apply(ev.RunStarted(input="view", input_ref=ref))
    state.seq = 1
    state.input = "the whole input"
    state.history[0] = dataclasses.replace(state.history[0], content="the whole input")
    text = checkpoint_text(state, runtime_version="t", agent_config_hash="h")
    restored = restore_checkpoint(
        text, state_version=STATE_VERSION, run_id="r", through_seq=1, agent_config_hash="h"
    )
    assert restored == replay("r", [ev.RunStarted(input="view", input_ref=ref)])
    assert "the whole input" not in text


# -- unusable checkpoints ---------------------------------------------------------------------------


def a_checkpoint() -> tuple[RunState, str]:
    state = replay("r", [ev.RunStarted(input="hi"), ev.StepStarted(step=1)])
    return state, checkpoint_text(state, runtime_version="t", agent_config_hash="h")


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda t: t[:-20], "does not decode"),
        (lambda t: t.replace('"input":"hi"', '"input":"ho"'), "checksum"),
        (lambda t: t.replace('"format":1', '"format":2'), "format"),
        (lambda t: "[]", "does not decode"),
    ],
)
def test_a_corrupted_checkpoint_is_unusable(change: Callable[[str], str], why: str) -> None:
    _, text = a_checkpoint()
    with pytest.raises(CheckpointUnusable, match=why):
        restore_checkpoint(
            change(text), state_version=STATE_VERSION, run_id="r", through_seq=2, agent_config_hash="h"
        )


def test_a_checkpoint_of_another_run_position_or_agent_snapshot_is_unusable() -> None:
    _, text = a_checkpoint()
    for run_id, seq, agent in (("other", 2, "h"), ("r", 3, "h"), ("r", 2, "changed")):
        with pytest.raises(CheckpointUnusable, match="checkpoint is of"):
            restore_checkpoint(
                text, state_version=STATE_VERSION, run_id=run_id, through_seq=seq, agent_config_hash=agent
            )


def test_an_unknown_field_makes_a_checkpoint_unusable_rather_than_dropped() -> None:
    state, _ = a_checkpoint()
    envelope = json.loads(checkpoint_text(state, runtime_version="t", agent_config_hash="h"))
    envelope["state"]["newer_field"] = 1
    body = json.dumps(envelope["state"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    envelope["sha256"] = __import__("hashlib").sha256(body.encode()).hexdigest()
    with pytest.raises(CheckpointUnusable, match="newer_field"):
        restore_checkpoint(
            json.dumps(envelope),
            state_version=STATE_VERSION,
            run_id="r",
            through_seq=2,
            agent_config_hash="h",
        )


def test_versions_a_newer_one_is_unusable_an_older_one_goes_through_its_upgraders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state, text = a_checkpoint()
    args = {"run_id": "r", "through_seq": 2, "agent_config_hash": "h"}
    with pytest.raises(CheckpointUnusable, match="newer"):
        restore_checkpoint(text, state_version=STATE_VERSION + 1, **args)
    with pytest.raises(CheckpointUnusable, match="no checkpoint upgrader"):
        restore_checkpoint(text, state_version=STATE_VERSION - 1, **args)

    seen: list[int] = []

    def upgrader(data: dict[str, object]) -> dict[str, object]:
        seen.append(1)
        return {**data, "reason": "upgraded"}

    monkeypatch.setitem(CHECKPOINT_UPGRADERS, STATE_VERSION - 1, upgrader)
    restored = restore_checkpoint(text, state_version=STATE_VERSION - 1, **args)
    assert seen == [1] and restored.reason == "upgraded"
    assert dataclasses.replace(restored, reason="") == state


# -- the engine: written every N events, read on resume -------------------------------------------


def many_steps_world(steps: int, *, every: int) -> EngineWorld:
    agent = AgentConfig(tools=["orders.lookup"])
    agent = agent.model_copy(
        update={
            "budgets": agent.budgets.model_copy(
                update={"max_model_steps": steps + 1, "max_tool_calls": steps}
            ),
            "loops": agent.loops.model_copy(
                update={"max_identical_calls": 0, "max_steps_without_new_fact": 0}
            ),
        }
    )
    world = EngineWorld(agent=agent, settings=settings(every))
    world.models.by_step = True
    for step in range(1, steps + 1):
        world.models.answer(tool_calls=[(f"c{step}", "orders.lookup", json.dumps({"id": step}))])
    world.models.answer(text="all looked up")
    world.tools.add("orders.lookup", ok({"status": "shipped"}), side_effect="read")
    return world


async def test_checkpoints_are_written_every_n_events_and_match_the_log() -> None:
    world = many_steps_world(10, every=10)
    run_id = world.create_run()
    await world.drive(run_id)
    assert world.log.phase(run_id) == "COMPLETED"
    events = events_of(world, run_id)
    marks = [(i + 1, e.through_seq) for i, e in enumerate(events) if isinstance(e, ev.RunCheckpointed)]
    assert len(marks) >= 3
    for seq, through in marks:
        assert seq == through + 1  # the event follows the state it stands for
    latest = world.log.checkpoints[run_id]
    assert latest.through_seq == marks[-1][1] and latest.state_version == STATE_VERSION
    restored = restore_checkpoint(
        latest.state,
        state_version=latest.state_version,
        run_id=run_id,
        through_seq=latest.through_seq,
        agent_config_hash=world.log.runs[run_id].agent_config_hash,
    )
    assert restored == replay(run_id, events[: latest.through_seq])


async def test_a_500_step_run_resumes_from_a_checkpoint_and_ends_as_a_full_replay_would() -> None:
    world = many_steps_world(500, every=200)
    run_id = world.create_run()
    world.log.crash_after = 700  # deep into the run: 2 commits a step
    with pytest.raises(Crashed):
        await world.drive(run_id)
    crashed_at = world.log.runs[run_id].last_seq
    checkpoint = world.log.checkpoints[run_id]
    assert 0 < crashed_at - checkpoint.through_seq < 220

    world.log.crash_after = None
    reads: list[int] = []
    read_events = world.log.read_events

    async def counting(run: str, *, after_seq: int = 0) -> list[object]:
        reads.append(after_seq)
        return await read_events(run, after_seq=after_seq)  # type: ignore[return-value]

    world.log.read_events = counting  # type: ignore[method-assign]
    world.take_over(run_id, "worker-2")
    await world.drive(run_id)

    assert reads[0] == checkpoint.through_seq  # the tail only, not the log from its start
    assert world.log.phase(run_id) == "COMPLETED"
    assert len(world.tools.calls) == 500
    steps = [p["step"] for p in world.log.payloads(run_id, "model.completed")]
    assert steps == sorted(set(steps)) and len(steps) == 501  # no step asked twice, none lost


async def test_a_corrupted_or_too_new_checkpoint_falls_back_to_a_full_replay(
    caplog: pytest.LogCaptureFixture,
) -> None:
    for spoil in ("corrupt", "too_new", "unreadable"):
        world = many_steps_world(12, every=10)
        run_id = world.create_run()
        world.log.crash_after = 25
        with pytest.raises(Crashed):
            await world.drive(run_id)
        world.log.crash_after = None
        good = world.log.checkpoints[run_id]
        if spoil == "corrupt":
            world.log.checkpoints[run_id] = dataclasses.replace(
                good, state=good.state.replace('"step":', '"stop":')
            )
        elif spoil == "too_new":
            world.log.checkpoints[run_id] = dataclasses.replace(good, state_version=STATE_VERSION + 1)
        else:

            async def unreadable(run: str) -> StoredCheckpoint | None:
                from agentrt.server.store import UnreadableRecord

                raise UnreadableRecord("sealed with a key that is gone")

            world.log.read_checkpoint = unreadable  # type: ignore[method-assign]
        world.take_over(run_id, "worker-2")
        with caplog.at_level(logging.WARNING, logger="agentrt.engine"):
            await world.drive(run_id)
        assert world.log.phase(run_id) == "COMPLETED", spoil
        assert any("replaying the log" in r.getMessage() for r in caplog.records), spoil
        assert len(world.tools.calls) == 12
        caplog.clear()


async def test_a_failed_checkpoint_write_costs_nothing_but_a_longer_resume(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = many_steps_world(6, every=5)

    async def broken(checkpoint: StoredCheckpoint) -> None:
        raise OSError("disk full")

    world.log.write_checkpoint = broken  # type: ignore[method-assign]
    run_id = world.create_run()
    with caplog.at_level(logging.WARNING, logger="agentrt.engine"):
        await world.drive(run_id)
    assert world.log.phase(run_id) == "COMPLETED"
    assert "run.checkpointed" in world.log.types(run_id)
    assert any("not written" in r.getMessage() for r in caplog.records)


async def test_checkpoints_off_write_none() -> None:
    world = many_steps_world(6, every=0)
    run_id = world.create_run()
    await world.drive(run_id)
    assert "run.checkpointed" not in world.log.types(run_id) and run_id not in world.log.checkpoints


def test_run_variables_of_every_kind_survive_a_checkpoint() -> None:
    state = replay("r", [ev.RunStarted(input="hi"), ev.StepStarted(step=1)])
    state.variables = {"order_id": "A100", "amount": 12.5, "count": 3, "verified": True}
    text = checkpoint_text(state, runtime_version="t", agent_config_hash="h")
    restored = restore_checkpoint(
        text, state_version=STATE_VERSION, run_id="r", through_seq=state.seq, agent_config_hash="h"
    )
    assert restored.variables == state.variables
    assert [type(v) for v in restored.variables.values()] == [str, float, int, bool]
    # A value of no variable kind (an object, a list) does not decode: refused, not smuggled in.
    decode = checkpoint_decoder(dict[str, ev.VariableValue])
    assert decode({"a": "x", "b": 1, "c": 1.5, "d": False}) == {"a": "x", "b": 1, "c": 1.5, "d": False}
    for bad in ({"x": 1}, [1], None):
        with pytest.raises(TypeError):
            decode({"v": bad})
