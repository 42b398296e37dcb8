"""A cancel always ends (§11.11): cancelled runs with writes in flight end CANCELLED within a bound.

Three runtime replicas on one PostgreSQL, one tool host (cancel grace 2 s) whose writes ignore a
request to stop, so only the host's hard stop after the grace cuts them, and then the host cannot
tell what they did. Where the tool's own store can tell (the query hook), the run learns it and
records it; where nobody can, the run still ends CANCELLED, listing the call as unknown and
handing it to a person (needs_attention). Nothing waits for an escalation an hour later.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentrt.client import Client, DeadlineExceededError, event_type
from agentrt.plugins.fault_tools import count_slow_writes
from agentrt.plugins.queryable_tools import count_queryable_writes
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import FakeModelServer, FakeResponse, RecordedRequest, ToolHostProcess, spawn_tool_host
from agentrt.toolhost._ledger import Ledger
from tests.fault.conftest import API_KEY, first_turn_calls, runtime_env, start_runtime

CANCEL_GRACE_S = 2.0
BOUND_S = CANCEL_GRACE_S + 5.0
# The call each run makes, by the word its input starts with.
CALLS: dict[str, dict[str, Any]] = {
    # Stopped where it stood; no store to ask: nobody can tell.
    "stubborn": {"tool": "stubborn.write", "arguments": {"seconds": 20.0, "note": "stubborn"}},
    # Stopped after its effect; its store says so.
    "landed": {
        "tool": "queryable.write",
        "arguments": {"seconds": 20.0, "effect_at_s": 0.2, "note": "landed"},
    },
    # Stopped before its effect; its store says so.
    "absent": {
        "tool": "queryable.write",
        "arguments": {"seconds": 20.0, "effect_at_s": 30.0, "note": "absent"},
    },
}
RUNS = {"stubborn": 7, "landed": 7, "absent": 6}


def answer(request: RecordedRequest) -> FakeResponse:
    """Chat Completions: the first turn calls the write its input names; later turns finish."""
    body = request.json()
    if request.headers.get("authorization") != f"Bearer {API_KEY}":
        return FakeResponse.json_body({"error": {"message": "bad API key"}}, status=401)
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    return first_turn_calls(body, CALLS[user.split()[0]])


@pytest.fixture
def write_host(tmp_path: Path) -> Iterator[ToolHostProcess]:
    with spawn_tool_host(
        tmp_path / "toolhost",
        plugins=["agentrt.plugins.fault_tools", "agentrt.plugins.queryable_tools"],
        extra_args=["--cancel-grace", str(CANCEL_GRACE_S)],
    ) as host:
        yield host


def started_key(address: str, run_id: str) -> str:
    with Client(address) as client:
        for event in client.stream_events(run_id, follow=True, timeout=30):
            if event.HasField("tool_started"):
                return event.tool_started.idempotency_key
    raise AssertionError("the write never started")


def running_on_host(data_dir: Path, keys: list[str]) -> None:
    """Until every write is in the host's ledger (the requests reached it)."""
    deadline = time.monotonic() + 20
    with Ledger(data_dir / "ledger.sqlite", owner="test-reader") as ledger:
        while any(ledger.get(key) is None for key in keys):
            assert time.monotonic() < deadline, "a write never reached the tool host"
            time.sleep(0.05)


def test_twenty_cancelled_runs_with_writes_in_flight_all_end_cancelled_within_the_bound(
    tmp_path: Path, write_host: ToolHostProcess, pg_url: str
) -> None:
    with FakeModelServer(default=answer) as server:
        env = runtime_env(
            db_url=pg_url,
            tool_host=write_host.address,
            model_url=f"{server.url}/v1",
            tools=("stubborn.write", "queryable.write"),
            lease_ttl_s=5.0,  # about cancels, not takeovers: a loaded machine must not lose leases
        )
        replicas = [start_runtime(tmp_path, env) for _ in range(3)]
        try:
            runs: list[tuple[str, str, int]] = []  # (kind, run id, replica that started it)
            for kind, count in RUNS.items():
                for n in range(count):
                    replica = len(runs) % 3
                    with Client(replicas[replica].address) as client:
                        run_id = client.start_run("refund", f"{kind} write {n}").run_id
                    runs.append((kind, run_id, replica))
            keys = {run_id: started_key(replicas[r].address, run_id) for _, run_id, r in runs}
            running_on_host(write_host.data_dir, list(keys.values()))

            def cancel_and_follow(item: tuple[str, str, int]) -> tuple[float, list[Any], Any]:
                _, run_id, started_on = item
                other = replicas[(started_on + 1) % 3]  # a cancel often lands on another replica
                events: list[Any] = []
                with Client(other.address) as client:
                    asked = time.time()
                    client.cancel_run(run_id, reason="customer called back")
                    with contextlib.suppress(DeadlineExceededError):  # the assertions below say what came
                        events.extend(
                            e for e in client.stream_events(run_id, follow=True, timeout=20) if e.seq
                        )
                    run = client.get_run(run_id)
                return time.time() - asked, events, run

            with concurrent.futures.ThreadPoolExecutor(max_workers=len(runs)) as pool:
                results = list(pool.map(cancel_and_follow, runs))
        finally:
            for replica in replicas:
                replica.close()

    took = sorted(t for t, _, _ in results)
    print(
        f"\n{len(runs)} cancelled runs with writes in flight over 3 replicas: run.ended after the "
        f"cancel in {took[0]:.2f}..{took[-1]:.2f} s (median {took[len(took) // 2]:.2f} s, "
        f"bound {BOUND_S:g} s)"
    )
    for (kind, run_id, _), (seconds, events, run) in zip(runs, results, strict=True):
        types = [event_type(e) for e in events]
        assert types and types[-1] == "run.ended", (kind, types, run_pb2.RunPhase.Name(run.phase))
        ended = events[-1].run_ended
        assert ended.phase == run_pb2.RUN_PHASE_CANCELLED, (kind, types)
        assert seconds < BOUND_S, (kind, seconds, types)
        key = keys[run_id]
        unknown = [c.call_id for c in ended.unknown_calls]
        done = [c.call_id for c in ended.completed_calls]
        if kind == "stubborn":
            # Stopped where it stood, and nobody can tell: listed unknown, handed to a person.
            assert count_slow_writes(write_host.data_dir, key) == 0  # cut before its effect
            assert unknown == ["call_1"] and not done and ended.partial, (kind, types)
            assert run.needs_attention
        elif kind == "landed":
            assert count_queryable_writes(write_host.data_dir, key) == 1
            assert done == ["call_1"] and not unknown, (kind, types)
            assert "tool.completed" in types and not run.needs_attention
        else:
            assert count_queryable_writes(write_host.data_dir, key) == 0
            assert not done and not unknown and "tool.failed" in types, (kind, types)
            assert not run.needs_attention
    with Ledger(write_host.data_dir / "ledger.sqlite", owner="test-reader") as ledger:
        executions = [ledger.get(key).executions for key in keys.values()]  # type: ignore[union-attr]
    assert executions == [1] * len(runs)  # every write ran once, and only once
