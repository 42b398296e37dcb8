"""The engine's spans through the real step loop (agentrt.testing.engine): the tree under the run's
stored context, each tool call's traceparent naming its execute_tool span, waits as span events,
and a new owner's spans under the same root after a crash.

The helpers' tracer comes from an SDK provider of the test's own (the global one stays unset).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentrt.server.config import AgentConfig, Settings
from agentrt.server.models import ModelTransientError
from agentrt.server.telemetry import _tracing
from agentrt.server.tools import CallMetadata, ToolOutcome
from agentrt.testing.engine import EngineWorld

ROOT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
ROOT_SPAN = 0xB7AD6B7169203331


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(_tracing, "_tracer", lambda: provider.get_tracer("agentrt.runtime"))
    try:
        yield exporter
    finally:
        provider.shutdown()


def traced_world() -> tuple[EngineWorld, list[CallMetadata]]:
    seen: list[CallMetadata] = []
    attempts = iter(
        [ToolOutcome.failure("TRANSIENT", "down for a moment"), ToolOutcome('{"ok": true}', None)]
    )

    async def lookup(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        seen.append(metadata)
        return next(attempts)

    settings = Settings(retry_base_s=0.01, retry_cap_s=0.05)
    world = EngineWorld(agent=AgentConfig(tools=["orders.lookup"]), settings=settings)
    world.tools.add("orders.lookup", lookup, side_effect="read", idempotent=True)
    return world, seen


def stored_root(world: EngineWorld, run_id: str) -> None:
    """The row as StartRun leaves it under a traced caller."""
    world.log.runs[run_id] = dataclasses.replace(world.log.runs[run_id], trace_context=ROOT)


def by_name(finished: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in finished if s.name == name]


async def test_a_run_is_one_tree_under_its_stored_context(spans: InMemorySpanExporter) -> None:
    world, seen = traced_world()
    world.models.fail(ModelTransientError("overloaded", reason="overloaded"))
    world.models.answer(tool_calls=[("c1", "orders.lookup", '{"id": "A1"}')])
    world.models.answer(text="done")
    run_id = world.create_run()
    stored_root(world, run_id)
    await world.drive(run_id)
    assert world.log.phase(run_id) == "COMPLETED"
    finished = spans.get_finished_spans()
    assert {s.context.trace_id for s in finished} == {TRACE_ID}
    (agent,) = by_name(finished, "invoke_agent agent")
    assert agent.parent is not None and agent.parent.span_id == ROOT_SPAN
    steps = [s for s in finished if s.name.startswith("agentrt.step")]
    assert all(s.parent is not None and s.parent.span_id == agent.context.span_id for s in steps)
    # Each decision to act is a step: two model steps, and the tool call's two attempts.
    assert sorted(s.name for s in steps) == ["agentrt.step model"] * 2 + ["agentrt.step tool"] * 2
    # The first model step: a failed attempt, a retry event, then the attempt that answered.
    first_step = min((s for s in steps if s.name == "agentrt.step model"), key=lambda s: s.start_time or 0)
    chats = [
        s
        for s in finished
        if s.name.startswith("chat ") and s.parent and s.parent.span_id == first_step.context.span_id
    ]
    assert len(chats) == 2
    assert [c.attributes["error.type"] for c in chats if c.attributes and "error.type" in c.attributes] == [
        "overloaded"
    ]
    assert [e.name for e in first_step.events] == ["agentrt.retry_scheduled"]
    # The tool call: two attempts, each its own execute_tool span, each sent with its traceparent.
    executes = by_name(finished, "execute_tool orders.lookup")
    assert len(executes) == 2 and len(seen) == 2
    for span, metadata in zip(sorted(executes, key=lambda s: s.start_time or 0), seen, strict=True):
        assert metadata.traceparent.split("-")[1:3] == [f"{TRACE_ID:032x}", f"{span.context.span_id:016x}"]
    assert [e.name for e in agent.events].count("agentrt.wait") == 1  # the tool retry's backoff


async def test_a_new_owner_goes_on_under_the_same_root(spans: InMemorySpanExporter) -> None:
    world, _ = traced_world()
    world.models.answer(tool_calls=[("c1", "orders.lookup", '{"id": "A1"}')])
    world.models.answer(text="done")
    run_id = world.create_run()
    stored_root(world, run_id)
    world.fault_plan = type(world.fault_plan)("after_model_response@1=raise")
    await world.drive(run_id)  # a contained fault: the owner lets the run go
    world.fault_plan = type(world.fault_plan)("")
    world.take_over(run_id, "worker-2")
    await world.drive(run_id)
    assert world.log.phase(run_id) == "COMPLETED"
    agents = by_name(spans.get_finished_spans(), "invoke_agent agent")
    assert len(agents) >= 2
    assert {a.parent.span_id for a in agents if a.parent is not None} == {ROOT_SPAN}
    assert {a.context.trace_id for a in agents} == {TRACE_ID}


async def test_a_run_without_a_stored_context_starts_its_own_trace(spans: InMemorySpanExporter) -> None:
    world, seen = traced_world()
    world.models.answer(tool_calls=[("c1", "orders.lookup", '{"id": "A1"}')])
    world.models.answer(text="done")
    run_id = world.create_run()  # trace_context None: a run from before tracing, or untraced
    await world.drive(run_id)
    (agent,) = by_name(spans.get_finished_spans(), "invoke_agent agent")
    assert agent.parent is None  # a root of its own, not a stray parent
    assert all(m.traceparent.split("-")[1] == f"{agent.context.trace_id:032x}" for m in seen)


async def test_an_approval_wait_is_an_event_of_the_run_span(spans: InMemorySpanExporter) -> None:
    async def issue(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        return ToolOutcome('{"refunded": true}', None)

    world = EngineWorld(agent=AgentConfig(tools=["refund.issue"]))
    world.tools.add("refund.issue", issue, side_effect="write", requires_approval=True)
    world.models.answer(tool_calls=[("c1", "refund.issue", '{"order_id": "A1"}')])
    run_id = world.create_run()
    stored_root(world, run_id)
    await world.drive(run_id)
    assert world.log.phase(run_id) == "WAITING_APPROVAL"
    (agent,) = by_name(spans.get_finished_spans(), "invoke_agent agent")
    names = [e.name for e in agent.events]
    assert names[-2:] == ["agentrt.approval_requested", "agentrt.parked"]
    requested = agent.events[-2].attributes
    assert requested is not None and dict(requested) == {"tool": "refund.issue", "call_id": "c1"}
    assert not by_name(spans.get_finished_spans(), "execute_tool refund.issue")  # nothing was sent
