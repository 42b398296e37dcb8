"""A long run over a small context window, killed mid-step, resumed from a checkpoint (issue 11).

The model is an OpenAI-compatible profile pointed at agentrt.testing's FakeModelServer, which
outlives the runtime and records every request byte for byte. The agent's context limit is small,
so later steps leave the oldest steps out and clip oversized results; checkpoints are written
every few events. The runtime dies after sending step 6 to the model and before recording its
answer; a new runtime resumes the run from its latest checkpoint and the log's tail, asks step 6
again with a byte-identical request, and the run completes with its window decisions in the log.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentrt.client import Client, event_type
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.server.engine._faults import FAULT_EXIT_CODE
from agentrt.testing import FakeModelServer, FakeResponse, RecordedRequest, ToolHostProcess, spawn_tool_host
from tests.fault.conftest import follow_to_end, start_runtime

STEPS = 9
LIMIT_TOKENS = 1500
KEY = "sk-context-test-not-secret"


def answer(request: RecordedRequest) -> FakeResponse:
    """Step n (the highest call_<n> the prompt shows, plus one) asks for one more blob, then answers."""
    body = request.json()
    seen = [int(n) for n in re.findall(r'"call_(\d+)"', request.body.decode())]
    step = max(seen, default=0) + 1
    message: dict[str, Any] = {"role": "assistant", "content": None}
    if step <= STEPS:
        arguments = json.dumps({"size_bytes": 2500, "seed": str(step)})
        message["tool_calls"] = [
            {
                "id": f"call_{step}",
                "type": "function",
                "function": {"name": "blob__make", "arguments": arguments},
            }
        ]
    else:
        message["content"] = "made every blob"
    return FakeResponse.json_body(
        {
            "id": f"chatcmpl-{step}",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if step <= STEPS else "stop"}
            ],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10},
        },
        headers={"x-request-id": f"req-{step}"},
    )


@pytest.fixture
def blob_host(tmp_path: Path) -> Iterator[ToolHostProcess]:
    with spawn_tool_host(tmp_path / "toolhost", plugins=["agentrt.plugins.blob_tools"]) as host:
        yield host


def env_for(
    db_url: str, host: str, model_url: str, fault: str = "", context: dict[str, Any] | None = None
) -> dict[str, str]:
    profile = {
        "provider": "openai",
        "name": "gpt-small",
        "options": {"base_url": model_url, "api_key_env": "FAKE_KEY", "temperature": 0.2},
        "context_tokens": LIMIT_TOKENS,
    }
    agent = {
        "instructions": "Make the blobs you are asked for.",
        "tools": ["blob.make"],
        "model": {"profile": "small"},
        "budgets": {"max_model_steps": STEPS + 2, "timeout_s": 60},
        "loops": {"max_steps_without_new_fact": 0},
        "context": context or {"strategy": "keep_recent", "keep_turns": 2},
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRT_")}
    env.update(
        FAKE_KEY=KEY,
        AGENTRT_DB_URL=db_url,
        AGENTRT_LEASE_TTL_S="1.0",
        AGENTRT_POLL_INTERVAL_S="0.1",
        AGENTRT_GRACE_S="0.5",
        AGENTRT_TOOL_HOSTS=json.dumps([{"name": "local", "address": host}]),
        AGENTRT_MODEL_PROFILES=json.dumps({"small": profile}),
        AGENTRT_AGENTS=json.dumps({"blobs": agent}),
        AGENTRT_CHECKPOINTS__EVERY_EVENTS="6",
    )
    if fault:
        env["AGENTRT_FAULT_POINT"] = fault
    return env


def test_a_crash_mid_run_resumes_from_a_checkpoint_and_resends_the_same_request(
    tmp_path: Path, blob_host: ToolHostProcess, sqlite_url: str
) -> None:
    with FakeModelServer(default=answer) as server:
        model_url = f"{server.url}/v1"
        crashed = start_runtime(
            tmp_path,
            env_for(sqlite_url, blob_host.address, model_url, fault="before_commit:model.completed@6"),
        )
        try:
            with Client(crashed.address) as client:
                run_id = client.start_run("blobs", "make nine blobs").run_id
            assert crashed.wait_exit(60) == FAULT_EXIT_CODE, crashed.stderr_text()[-2000:]
        finally:
            crashed.close()
        before = len(server.requests)
        assert before == 6
        healthy = start_runtime(tmp_path, env_for(sqlite_url, blob_host.address, model_url))
        try:
            events = [e for e in follow_to_end(healthy.address, run_id) if e.seq]
            with Client(healthy.address) as client:
                run = client.get_run(run_id)
            healthy.stop()
            logs = healthy.stderr_text()
        finally:
            healthy.close()
        requests = server.requests

    assert run.phase == run_pb2.RUN_PHASE_COMPLETED, [event_type(e) for e in events]
    # Step 6 was asked twice, around the crash: the same bytes both times.
    assert requests[5].body == requests[6].body
    assert len(requests) == STEPS + 2
    assert "replaying the log" not in logs  # the resume went through the checkpoint
    windows = [e.step_started.context for e in events if e.HasField("step_started")]
    assert windows[5].omitted_after_input > 0  # the step asked twice had left old steps out
    assert all(w.limit_tokens == LIMIT_TOKENS for w in windows)
    assert windows[-1].omitted_after_input > 0 and windows[-1].full_tokens > LIMIT_TOKENS
    assert any(c.full_bytes > c.kept_bytes for w in windows for c in w.clipped)
    latest = json.loads(requests[-1].body)
    assert len(latest["messages"]) < 2 + 2 * STEPS
    assert "clipped to its first" in json.dumps(latest["messages"])
    # The log keeps every result whole.
    results = [e.tool_completed for e in events if e.HasField("tool_completed")]
    assert len(results) == STEPS and all(len(r.result_json) >= 2500 for r in results)

    marks = [e.run_checkpointed.through_seq for e in events if e.HasField("run_checkpointed")]
    assert marks
    db = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))
    try:
        rows = db.execute("SELECT through_seq FROM run_checkpoints WHERE run_id = ?", (run_id,)).fetchall()
    finally:
        db.close()
    assert rows == [(marks[-1],)]


def summarising_answer(request: RecordedRequest) -> FakeResponse:
    """A summary request (no tools, the summariser's instructions) gets a summary; steps as before."""
    body = request.json()
    if "tools" not in body and "condense" in body["messages"][0]["content"]:
        made = sorted({int(n) for n in re.findall(r"seed[^0-9]*(\d+)", body["messages"][1]["content"])})
        text = f"Made blobs {made[0]} to {made[-1]}." if made else "Made nothing yet."
        return FakeResponse.json_body(
            {
                "id": "chatcmpl-summary",
                "object": "chat.completion",
                "model": body["model"],
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 300, "completion_tokens": 12},
            }
        )
    return answer(request)


def test_the_runs_model_summarises_what_the_window_leaves_out_over_the_real_wire(
    tmp_path: Path, blob_host: ToolHostProcess, sqlite_url: str
) -> None:
    context = {"strategy": "summarise", "summariser": "model", "keep_turns": 2}
    with FakeModelServer(default=summarising_answer) as server:
        runtime = start_runtime(
            tmp_path, env_for(sqlite_url, blob_host.address, f"{server.url}/v1", context=context)
        )
        try:
            with Client(runtime.address) as client:
                run_id = client.start_run("blobs", "make nine blobs").run_id
            events = [e for e in follow_to_end(runtime.address, run_id) if e.seq]
            with Client(runtime.address) as client:
                run = client.get_run(run_id)
        finally:
            runtime.close()
        requests = [json.loads(r.body) for r in server.requests]

    assert run.phase == run_pb2.RUN_PHASE_COMPLETED, [event_type(e) for e in events]
    summaries = [e.summary_completed for e in events if e.HasField("summary_completed")]
    asked = [r for r in requests if "tools" not in r]
    assert summaries and len(summaries) == len(asked)
    assert all(
        s.text.startswith("Made blobs 1 to") and s.response_id == "chatcmpl-summary" for s in summaries
    )
    windows = {e.step_started.step: e.step_started.context for e in events if e.HasField("step_started")}
    assert all(windows[s.step].summary == s.text for s in summaries)
    # The step after each summary shows it in place of the oldest steps.
    assert f"Summary: {summaries[-1].text}" in json.dumps(requests[-1]["messages"])
    # Summaries count in tokens (300 each), not as model steps.
    assert run.usage.model_steps == STEPS + 1
    assert run.usage.input_tokens == 100 * (STEPS + 1) + 300 * len(summaries)
