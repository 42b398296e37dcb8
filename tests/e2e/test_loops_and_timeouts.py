"""Loop exits and timeout layers over real processes: a runtime, a tool host, a fake OpenAI model.

- An answer flip-flopping between two states with no new fact earns one diagnostic step, then
  the run ends FAILED ``loop_detected`` (``flip_flop``); the same error over and over exits the
  same way (``repeated_error``).
- The step layer fires before the run's deadline: a tool answering TRANSIENT forever stops at
  ``[timeouts] tool_step_s`` with ``step_timeout``, and a model that never answers ends the run
  ``step_timeout`` at ``model_step_s``, both while the run has a minute left.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from agentrt.client import Client, event_type
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.testing import FakeModelServer, FakeResponse, start_tool_host
from tests.fault.conftest import runtime_env, serve_fake_openai, start_runtime

PLUGINS = ["agentrt.plugins.demo_tools", "agentrt.plugins.fault_tools"]


def with_loops(env: dict[str, str], **loops: int) -> dict[str, str]:
    agents = json.loads(env["AGENTRT_AGENTS"])
    agents["refund"]["loops"] = loops
    return {**env, "AGENTRT_AGENTS": json.dumps(agents)}


def run_to_end(env: dict[str, str], tmp_path: Path, text: str) -> tuple[list[run_pb2.RunEvent], run_pb2.Run]:
    runtime = start_runtime(tmp_path, env)
    try:
        with Client(runtime.address) as client:
            run_id = client.start_run("refund", text).run_id
            events = [e for e in client.stream_events(run_id, follow=True, timeout=60) if e.seq]
            return events, client.get_run(run_id)
    finally:
        runtime.close()


def test_an_answer_flip_flopping_between_two_states_ends_through_one_diagnostic_step(tmp_path: Path) -> None:
    host = start_tool_host(tmp_path / "host", plugins=PLUGINS)
    script: dict[int, dict[str, Any]] = {
        step: {"text": f"switching to {mode}", "tool": "noop.echo", "arguments": {"mode": mode}}
        for step, mode in ((1, "fast"), (2, "safe"), (3, "fast"), (4, "safe"), (5, "fast"), (6, "safe"))
    }
    script[6] = {"text": "I kept switching between fast and safe"}  # the diagnostic step's answer
    try:
        with serve_fake_openai(script) as (fake, model_url):
            env = runtime_env(
                db_url=f"sqlite:///{tmp_path / 'rt.sqlite'}",
                tool_host=host.address,
                model_url=model_url,
                tools=("noop.echo",),
            )
            # Only the flip-flop check: repeated identical calls would catch it otherwise.
            env = with_loops(env, max_identical_calls=0, max_steps_without_new_fact=0)
            events, run = run_to_end(env, tmp_path, "pick a mode")
            asked = len(fake.bodies)
    finally:
        host.stop()
    assert run.phase == run_pb2.RUN_PHASE_FAILED and run.reason == "loop_detected", run.reason
    diagnostic = [e.step_started for e in events if e.HasField("step_started") and e.step_started.reason]
    assert len(diagnostic) == 1 and diagnostic[0].reason.startswith("flip_flop")
    assert diagnostic[0].kind == run_pb2.STEP_KIND_DIAGNOSTIC
    (failed,) = [e.run_failed for e in events if e.HasField("run_failed")]
    assert "I kept switching" in failed.message
    assert asked == 6  # five answers, then the one diagnostic step: never a seventh


def test_the_same_error_over_and_over_ends_through_one_diagnostic_step(tmp_path: Path) -> None:
    host = start_tool_host(tmp_path / "host", plugins=PLUGINS)
    lookup = {"tool": "orders.lookup", "arguments": {"order_id": "Z999"}}
    script: dict[int, dict[str, Any]] = {1: lookup, 2: lookup, 3: lookup, 4: {"text": "Z999 does not exist"}}
    try:
        with serve_fake_openai(script) as (_, model_url):
            env = runtime_env(
                db_url=f"sqlite:///{tmp_path / 'rt.sqlite'}",
                tool_host=host.address,
                model_url=model_url,
                tools=("orders.lookup",),
            )
            env = with_loops(env, max_identical_calls=0)
            events, run = run_to_end(env, tmp_path, "look up Z999")
    finally:
        host.stop()
    failures = [e.tool_failed for e in events if e.HasField("tool_failed")]
    assert len(failures) == 3
    assert all(f.error.code == tool_pb2.TOOL_ERROR_CODE_PERMANENT for f in failures)
    diagnostic = [
        e.step_started.reason for e in events if e.HasField("step_started") and e.step_started.reason
    ]
    assert len(diagnostic) == 1 and diagnostic[0].startswith("repeated_error: orders.lookup")
    assert run.phase == run_pb2.RUN_PHASE_FAILED and run.reason == "loop_detected"


def test_the_tool_step_layer_fires_before_the_run_deadline(tmp_path: Path) -> None:
    host = start_tool_host(tmp_path / "host", plugins=PLUGINS)
    flaky = {"tool": "flaky.transient", "arguments": {"delay_s": 0.1}}
    try:
        with serve_fake_openai({1: flaky, 2: {"text": "the dependency stayed down"}}) as (_, model_url):
            env = runtime_env(
                db_url=f"sqlite:///{tmp_path / 'rt.sqlite'}",
                tool_host=host.address,
                model_url=model_url,
                tools=("flaky.transient",),
                tool_attempts=1000,
                retry_base_s=0.1,
                retry_cap_s=0.2,
                timeouts={"tool_step_s": 2},
                timeout_s=60,
            )
            events, run = run_to_end(env, tmp_path, "read it")
    finally:
        host.stop()
    assert run.phase == run_pb2.RUN_PHASE_COMPLETED  # the model was told, and answered
    started = [e for e in events if e.HasField("tool_started")]
    (failed,) = [e for e in events if e.HasField("tool_failed")]
    assert failed.tool_failed.error.message.startswith("step_timeout")
    took = failed.time.ToDatetime() - started[0].time.ToDatetime()
    assert 1.5 <= took.total_seconds() <= 5, took  # the step's 2 s, not the run's 60 s
    assert len(started) > 3  # retried within the step until it ran out


def test_the_model_step_layer_ends_the_run_before_its_deadline(tmp_path: Path) -> None:
    host = start_tool_host(tmp_path / "host", plugins=PLUGINS)
    # Headers, then nothing until the test ends: a model that never answers.
    hung = dataclasses.replace(FakeResponse.json_body({"never": "sent"}), pause_at=0)
    try:
        with FakeModelServer(default=lambda request: hung) as server:
            env = runtime_env(
                db_url=f"sqlite:///{tmp_path / 'rt.sqlite'}",
                tool_host=host.address,
                model_url=f"{server.url}/v1",
                tools=("noop.echo",),
                model_timeout_s=30,
                timeouts={"model_step_s": 1.5},
                timeout_s=60,
            )
            events, run = run_to_end(env, tmp_path, "say something")
            hung.gate.set()
    finally:
        host.stop()
    assert run.phase == run_pb2.RUN_PHASE_FAILED and run.reason == "step_timeout", run.reason
    assert event_type(events[-1]) == "run.ended"
    took = events[-1].time.ToDatetime() - events[0].time.ToDatetime()
    assert took.total_seconds() < 10, took  # the step's 1.5 s, not the call's 30 s or the run's 60 s
