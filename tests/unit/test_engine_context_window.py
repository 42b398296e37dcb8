"""The context window and the reproducibility record in the step loop (in-process).

A run whose history outgrows a small context limit completes, each step's window decision is on
its step.started, and a step asked again after a crash sends the same request even when the
configured limit changed meanwhile: the request is a function of the log. Model steps record their
sampling options, model, provider ids and latency; tool results their times and host.
"""

from __future__ import annotations

import asyncio
import json

from agentrt.server.config import AgentConfig, ContextConfig, ModelConfig, ModelProfileConfig, Settings
from agentrt.server.core import parse_rfc3339_ms
from agentrt.server.models import ModelRequest, ModelTransientError
from agentrt.server.policies import hookimpl
from agentrt.server.tools import CallMetadata, ToolOutcome
from agentrt.testing.engine import EngineWorld

STEPS = 8


async def lookup(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
    order = json.loads(arguments_json)["id"]
    return ToolOutcome(json.dumps({"order": order, "notes": f"order {order} " + "n" * 900}), None)


def world_with_limit(
    limit: int, *, context: ContextConfig | None = None, plugins: tuple[object, ...] = ()
) -> EngineWorld:
    profile = ModelProfileConfig(
        provider="scripted", name="small", context_tokens=limit, options={"temperature": 0.2}
    )
    settings = Settings(retry_base_s=0.01, retry_cap_s=0.05, model_profiles={"small": profile})
    agent = AgentConfig(
        instructions="Look up each order.",
        tools=["orders.lookup"],
        model=ModelConfig(profile="small", options={"seed": 7}),
        context=context or ContextConfig(),
    )
    world = EngineWorld(agent=agent, settings=settings, policy_plugins=plugins)
    world.models.by_step = True
    for step in range(1, STEPS + 1):
        world.models.answer(tool_calls=[(f"call_{step}", "orders.lookup", json.dumps({"id": step}))])
    world.models.answer(text="all looked up")
    world.tools.add("orders.lookup", lookup, side_effect="read")
    return world


def request_bytes(world: EngineWorld, index: int) -> str:
    request = world.models.requests[index]
    messages = [(m.role, m.content, m.tool_calls, m.tool_call_id) for m in request.messages]
    return json.dumps([repr(messages), repr(request.tools), request.spec.name, request.step])


async def test_a_history_over_the_limit_completes_with_its_window_decisions_in_the_events() -> None:
    world = world_with_limit(1200)
    run_id = world.create_run("look up orders 1 to 8")
    await world.drive(run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    windows = [p["context"] for p in world.log.payloads(run_id, "step.started")]
    assert len(windows) == STEPS + 1
    assert all(w["limit_tokens"] == 1200 and w["strategy"] == "keep_recent" for w in windows)
    assert windows[0].get("omitted_after_input", 0) == 0
    late = windows[-1]
    assert late["full_tokens"] > 1200 >= late["estimated_tokens"] and late["omitted_after_input"] > 0
    last = world.models.requests[-1]
    assert last.messages[1].content == "look up orders 1 to 8"  # the input is always shown
    assert len(last.messages) < 2 + 2 * STEPS
    # The log keeps every result whole.
    assert all(len(p["result_json"]) > 900 for p in world.log.payloads(run_id, "tool.completed"))


async def test_a_step_asked_again_after_a_crash_sends_the_same_request_even_after_a_config_change() -> None:
    world = world_with_limit(1200)
    run_id = world.create_run("look up orders 1 to 8")
    gate = asyncio.Event()
    world.models.gate = gate
    task = world.start(run_id)
    for _ in range(5):  # let four steps through, then hold the fifth in flight
        async with asyncio.timeout(5):
            await world.models.in_flight.wait()
        world.models.in_flight.clear()
        if len(world.models.requests) == 5:
            break
        gate.set()
        await asyncio.sleep(0)
        gate.clear()
    assert len(world.models.requests) == 5
    await world.crash(task)
    first = request_bytes(world, 4)

    # The operator raises the limit meanwhile: the step in flight keeps the window it recorded.
    bigger = world.settings.model_profiles["small"].model_copy(update={"context_tokens": 100_000})
    world.settings = world.settings.model_copy(update={"model_profiles": {"small": bigger}})
    world.models.gate = None
    world.take_over(run_id, "worker-2")
    await world.drive(run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    assert world.models.requests[5].step == 5
    assert request_bytes(world, 5) == first
    windows = [p["context"] for p in world.log.payloads(run_id, "step.started")]
    assert windows[4]["limit_tokens"] == 1200 and windows[5]["limit_tokens"] == 100_000


async def test_clip_tool_results_is_recorded_with_what_it_clipped() -> None:
    world = world_with_limit(1500, context=ContextConfig(strategy="clip_tool_results", clip_bytes=100))
    run_id = world.create_run()
    await world.drive(run_id)
    assert world.log.phase(run_id) == "COMPLETED"
    clipped = [c for p in world.log.payloads(run_id, "step.started") for c in p["context"].get("clipped", [])]
    assert clipped and all(c["kept_bytes"] == 100 for c in clipped)
    shown = [m.content for m in world.models.requests[-1].messages if m.role == "tool"]
    assert any("clipped to its first 100 of" in text for text in shown)


class Summariser:
    def __init__(self) -> None:
        self.asked: list[int] = []

    @hookimpl(optionalhook=True)
    def agentrt_summarise(
        self, agent_name: str, entries: list[dict[str, object]], max_bytes: int, options: dict[str, object]
    ) -> str | None:
        self.asked.append(len(entries))
        calls = [c["call_id"] for e in entries for c in e["tool_calls"]]  # type: ignore[attr-defined]
        return f"{options['prefix']} looked up {', '.join(calls)}"


async def test_summarise_records_the_hooks_summary_and_shows_it_in_place_of_the_old_steps() -> None:
    summariser = Summariser()
    context = ContextConfig(strategy="summarise", options={"prefix": "Earlier:"})
    world = world_with_limit(1500, context=context, plugins=(summariser,))
    run_id = world.create_run()
    await world.drive(run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    summarised = [
        p["context"] for p in world.log.payloads(run_id, "step.started") if "summary" in p["context"]
    ]
    assert summarised and summarised[-1]["summary"].startswith("Earlier: looked up call_1")
    assert len(summariser.asked) == len(summarised)  # asked once per step that left something out
    notes = [m.content for m in world.models.requests[-1].messages if "Summary: Earlier:" in m.content]
    assert len(notes) == 1


async def test_summarise_without_a_summariser_keeps_the_recent_turns_and_says_so() -> None:
    world = world_with_limit(1500, context=ContextConfig(strategy="summarise"))
    run_id = world.create_run()
    await world.drive(run_id)
    assert world.log.phase(run_id) == "COMPLETED"
    strategies = {p["context"]["strategy"] for p in world.log.payloads(run_id, "step.started")}
    assert "keep_recent" in strategies


async def test_no_limit_records_no_window_and_sends_the_whole_history() -> None:
    world = world_with_limit(0)
    run_id = world.create_run()
    await world.drive(run_id)
    assert all("context" not in p for p in world.log.payloads(run_id, "step.started"))
    assert len(world.models.requests[-1].messages) == 2 + 2 * STEPS


async def test_model_and_tool_steps_record_what_shaped_them_and_when() -> None:
    world = world_with_limit(0)
    run_id = world.create_run()
    await world.drive(run_id)
    completed = world.log.payloads(run_id, "model.completed")[0]
    assert completed["sampling"] == {"temperature": 0.2, "seed": 7}
    assert completed["model"] == "scripted/small"
    assert completed["latency"].endswith("s")
    tool = world.log.payloads(run_id, "tool.completed")[0]
    assert parse_rfc3339_ms(tool["start_time"]) <= parse_rfc3339_ms(tool["end_time"])
    assert tool["host"] == world.tools.host


def tokenizer_of_two_bytes(request: ModelRequest) -> int:
    """A provider whose tokenizer costs a token per two bytes (e.g. a script heavier than English)."""
    texts = [m.content for m in request.messages] + [repr(request.tools)]
    return sum(len(t.encode()) for t in texts) // 2


async def test_the_window_is_counted_in_the_providers_tokens_once_it_has_counted_a_request() -> None:
    world = world_with_limit(1200)
    world.models.count_prompt = tokenizer_of_two_bytes
    run_id = world.create_run("look up orders 1 to 8")
    await world.drive(run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    windows = [p["context"] for p in world.log.payloads(run_id, "step.started")]
    scales = [w.get("token_scale_permille", 0) for w in windows]
    # Step 1 has no count yet; later steps scale the 3-bytes-a-token estimate by what the provider
    # counted (about 1.5 times it, plus a tenth), and say so in the record.
    assert scales[0] == 0 and all(1400 <= s <= 1900 for s in scales[2:]), scales
    estimates = [p["prompt_estimate_tokens"] for p in world.log.payloads(run_id, "model.completed")]
    assert all(e > 0 for e in estimates)
    # What the provider counts of every calibrated request fits the limit. The byte estimate alone
    # (a token per three bytes) would have let the last requests reach 1.5 times it.
    counted = [tokenizer_of_two_bytes(r) for r in world.models.requests]
    assert max(counted[2:]) <= 1200, counted
    assert windows[-1]["omitted_after_input"] > 0


async def test_a_provider_that_counts_fewer_tokens_lets_the_window_keep_more_within_a_bound() -> None:
    def english(request: ModelRequest) -> int:  # a token per four bytes
        return tokenizer_of_two_bytes(request) // 2

    calibrated, reference = world_with_limit(1200), world_with_limit(1200)
    calibrated.models.count_prompt = english
    reference.models.count_prompt = tokenizer_of_two_bytes
    run_ids = [world.create_run("look up orders 1 to 8") for world in (calibrated, reference)]
    for world, run_id in zip((calibrated, reference), run_ids, strict=True):
        await world.drive(run_id)
    # The final step's prompt: more of the history fits when the provider counts fewer tokens.
    shown = [len(world.models.requests[-1].messages) for world in (calibrated, reference)]
    assert shown[0] > shown[1], shown
    windows = calibrated.log.payloads(run_ids[0], "step.started")
    scales = [p["context"].get("token_scale_permille", 0) for p in windows]
    assert min(s for s in scales if s) >= 750  # never trusted below three quarters of the estimate


# -- the run's model as the summariser, in a call of its own ----------------------------------------


async def test_the_runs_model_summarises_in_a_call_of_its_own_recorded_and_counted() -> None:
    context = ContextConfig(strategy="summarise", summariser="model", summary_bytes=400)
    world = world_with_limit(1500, context=context)
    world.models.summaries = [f"Looked up orders up to {n}." for n in range(1, 20)]
    run_id = world.create_run("look up orders 1 to 8")
    await world.drive(run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    types = world.log.types(run_id)
    summaries = world.log.payloads(run_id, "summary.completed")
    windows = {p["step"]: p["context"] for p in world.log.payloads(run_id, "step.started")}
    assert summaries and len(summaries) == len(world.models.summary_requests)
    for summary in summaries:
        # Each is its step's summary, recorded right after that step's step.started.
        assert windows[summary["step"]]["summary"] == summary["text"] and summary["entries"] > 0
        assert summary["model"] == "scripted/small"
    first = types.index("summary.completed")
    assert types[first - 1] == "step.started" and types[first + 1] == "model.completed"
    # The summariser saw the entries left out (the oldest lookups), not the latest ones, and no tools.
    asked = world.models.summary_requests[0]
    assert asked.tools == () and asked.messages[0].role == "system" and "order 1" in asked.messages[1].content
    # Its tokens count in the run's usage; it is not a model step.
    usage = json.loads(world.log.runs[run_id].usage)
    assert usage["model_steps"] == STEPS + 1
    assert usage["input_tokens"] == 10 * (STEPS + 1) + 100 * len(summaries)
    # The step's model sees the summary in place of what was left out.
    last_summary = summaries[-1]["text"]
    notes = [m.content for m in world.models.requests[-1].messages if last_summary in m.content]
    assert len(notes) == 1


async def test_a_failed_summary_call_leaves_the_recent_turns_and_the_run_goes_on() -> None:
    context = ContextConfig(strategy="summarise", summariser="model")
    world = world_with_limit(1500, context=context)
    world.models.summaries = [ModelTransientError("rate_limited: slow down")] * 20
    run_id = world.create_run()
    await world.drive(run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    assert "summary.completed" not in world.log.types(run_id)
    late = [p["context"] for p in world.log.payloads(run_id, "step.started")][-1]
    assert late["strategy"] == "keep_recent" and "summary" not in late and late["omitted_after_input"] > 0


async def test_a_step_resumed_after_a_crash_keeps_its_recorded_summary() -> None:
    context = ContextConfig(strategy="summarise", summariser="model")
    world = world_with_limit(1500, context=context)
    world.models.summaries = [f"summary {n}" for n in range(20)]
    run_id = world.create_run()
    gate = asyncio.Event()
    world.models.gate = gate
    task = world.start(run_id)
    while True:  # let steps through until one was summarised; hold that step's own call
        async with asyncio.timeout(5):
            await world.models.in_flight.wait()
        world.models.in_flight.clear()
        if world.models.summary_requests:
            break
        gate.set()
        await asyncio.sleep(0)
        gate.clear()
    await world.crash(task)
    asked = len(world.models.summary_requests)
    held_step = world.models.requests[-1].step
    held = request_bytes(world, len(world.models.requests) - 1)
    sent_before = len(world.models.requests)

    world.models.gate = None
    world.take_over(run_id, "worker-2")
    await world.drive(run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    # The step's window, summary included, was committed before its call: the new owner sends
    # the very same request, and asks for no new summary for that step.
    assert world.models.requests[sent_before].step == held_step
    assert request_bytes(world, sent_before) == held
    assert held_step not in [r.step for r in world.models.summary_requests[asked:]]
