"""Bounded stream followers (issue 9, point 6), through real processes.

A follower that stops reading is paused, then dropped with RESOURCE_EXHAUSTED /
FOLLOWER_STALLED once its buffer stayed full for ``streams.stall_timeout_s``; a
follower of the same run that reads gets every event, and text deltas in order; a
slow but reading follower falls back to the store and still gets a gapless,
duplicate-free sequence.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentrt.client import Client, RPCError, event_type
from agentrt.client._errors import from_call
from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2, runtime_service_pb2_grpc
from agentrt.testing import RuntimeProcess, ToolHostProcess, spawn_runtime
from tests.e2e.conftest import toml_value

STALL_S = 2.0
STEPS = 120
BLOB = "x" * 8000  # each step stores ~3 events of ~8 KB: model.completed, tool.started, tool.completed
# A client that never reads: a 64 KiB HTTP/2 window without BDP growth, so the server feels it at once.
SMALL_WINDOW = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 65536)]


@pytest.fixture
def runtime(tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str) -> Iterator[RuntimeProcess]:
    steps: list[dict[str, Any]] = [
        {
            "text": f"step {i} of the chatty agent",
            "deltas": True,
            "tool_calls": [{"tool": "noop.echo", "arguments": {"blob": "{input}", "i": i}}],
        }
        for i in range(STEPS)
    ]
    steps.append({"text": "all echoed"})
    text = f'db_url = "{sqlite_url}"\npoll_interval_s = 0.1\n'
    text += f'[[tool_hosts]]\nname = "local"\naddress = "{tool_host.address}"\n'
    text += (
        f"[streams]\nfollower_buffer_events = 8\nfollower_buffer_bytes = 65536\nstall_timeout_s = {STALL_S}\n"
    )
    budgets = {"max_model_steps": STEPS + 1, "max_tool_calls": STEPS, "timeout_s": 120}
    text += (
        '[agents."chatty"]\ninstructions = "echo a lot"\ntools = ["noop.echo"]\n'
        f'model = {{ provider = "scripted", options = {{ steps = {toml_value(steps)}, delay_s = 0.01 }} }}\n'
        f"budgets = {toml_value(budgets)}\n"
    )
    path = tmp_path / "followers.toml"
    path.write_text(text)
    with spawn_runtime(["--config", str(path), "--listen", "127.0.0.1:0"], cwd=tmp_path) as process:
        yield process


def check_sequence(events: list[run_pb2.RunEvent]) -> None:
    """Persisted events gapless and once each, ending the run; deltas inside their own step."""
    seqs = [e.seq for e in events if e.seq]
    assert seqs == list(range(1, len(seqs) + 1)), seqs[:20]
    assert event_type(events[-1]) == "run.ended" and events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
    completed = 0  # highest step whose model.completed was seen
    started = 0  # highest step whose step.started was seen
    for event in events:
        kind = event.WhichOneof("event")
        if kind == "model_completed":
            completed = event.model_completed.step
        elif kind == "step_started":
            started = event.step_started.step
        elif kind == "model_text_delta":
            step = event.model_text_delta.step
            assert completed < step <= max(started, completed + 1), (step, completed, started)


def test_a_never_reading_follower_is_dropped_while_a_reader_of_the_same_run_gets_everything(
    runtime: RuntimeProcess,
) -> None:
    with Client(runtime.address) as client:
        run_id = client.start_run("chatty", BLOB).run_id
        channel = grpc.insecure_channel(runtime.address, options=SMALL_WINDOW)
        stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channel)
        stalled = stub.StreamRunEvents(
            runtime_service_pb2.StreamRunEventsRequest(run_id=run_id, follow=True), timeout=120
        )  # opened, never read (until the end of the test)
        events = list(client.stream_events(run_id, follow=True, timeout=120))
        ended = time.monotonic()
        check_sequence(events)
        deltas = [e for e in events if e.HasField("model_text_delta")]
        assert len({d.model_text_delta.step for d in deltas}) >= STEPS // 2, len(deltas)

        # The non-reader's buffer filled while the run went on: it is dropped within the timeout.
        deadline = ended + STALL_S + 3
        while "dropping a stream reader that stopped reading" not in runtime.stderr_text():
            assert time.monotonic() < deadline, runtime.stderr_text()[-2000:]
            time.sleep(0.05)
        received: list[run_pb2.RunEvent] = []
        with pytest.raises(grpc.RpcError) as raised:
            for response in stalled:
                received.append(response.event)
        error = from_call(raised.value)
        assert isinstance(error, RPCError)
        assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED and error.reason == "FOLLOWER_STALLED"
        assert error.error_info is not None and error.error_info.metadata["run_id"] == run_id
        # What it did get is a clean prefix: it can resume after its last seq and get the rest.
        seqs = [e.seq for e in received if e.seq]
        assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) < len([e for e in events if e.seq])
        rest = list(client.stream_events(run_id, after_seq=seqs[-1] if seqs else 0, follow=True, timeout=30))
        assert [e.seq for e in rest] == list(range((seqs[-1] if seqs else 0) + 1, events[-1].seq + 1))
        channel.close()


def test_a_slow_but_reading_follower_gets_a_gapless_duplicate_free_sequence(runtime: RuntimeProcess) -> None:
    with Client(runtime.address) as client:
        run_id = client.start_run("chatty", BLOB).run_id
        channel = grpc.insecure_channel(runtime.address, options=SMALL_WINDOW)
        stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channel)
        slow: list[run_pb2.RunEvent] = []
        # Slower than the run: its live buffer overflows and it goes back to the store, repeatedly.
        for response in stub.StreamRunEvents(
            runtime_service_pb2.StreamRunEventsRequest(run_id=run_id, follow=True), timeout=120
        ):
            slow.append(response.event)
            time.sleep(0.01)
        channel.close()
        check_sequence(slow)
        fast = [e for e in client.stream_events(run_id, timeout=30)]
        assert [e.seq for e in slow if e.seq] == [e.seq for e in fast]


def test_many_concurrent_followers_each_get_the_whole_sequence(runtime: RuntimeProcess) -> None:
    with Client(runtime.address) as client:
        run_id = client.start_run("chatty", BLOB).run_id
        results: list[list[run_pb2.RunEvent]] = [[] for _ in range(6)]

        def follow(index: int) -> None:
            after = [0, 0, 5, 50, 200, 10_000][index]  # mid-run resumes too
            results[index].extend(client.stream_events(run_id, after_seq=after, follow=True, timeout=120))

        threads = [threading.Thread(target=follow, args=(i,)) for i in range(len(results))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        last = client.get_run(run_id).last_seq
        for index, events in enumerate(results):
            after = [0, 0, 5, 50, 200, 10_000][index]
            assert [e.seq for e in events if e.seq] == list(range(after + 1, last + 1)), index
