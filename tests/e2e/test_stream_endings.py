"""Streams end when they should (issue 9, point 3), through real processes.

A follow stream of an ended run ends at once whatever ``after_seq`` is; RunAgent
ends where the run waits for something outside itself (a person's approval, a
budget grant, an in-doubt write, an earlier turn of its session), its last item a
stream-only ``run.waiting``; StreamRunEvents(follow) follows through every wait.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from agentrt.client import Client, RPCError, event_type
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import RuntimeProcess, ToolHostProcess, spawn_runtime, start_tool_host
from agentrt.toolhost._faults import FAULT_ENV, FAULT_EXIT_CODE
from tests.e2e.conftest import agent_toml
from tests.fault.conftest import REFUND_SCRIPT, free_port, runtime_env, serve_fake_openai, start_runtime

LOOKUP = {"tool": "orders.lookup", "arguments": {"order_id": "A100"}}
BIG_REFUND = {"tool": "refund.issue", "arguments": {"order_id": "A100", "amount": 30.0, "reason": "broken"}}
APPROVAL_STEPS = [
    {"text": "checking", "tool_calls": [LOOKUP]},
    {"text": "refunding", "tool_calls": [BIG_REFUND]},
    {"text": "Refunded."},
]
NAP = {"text": "napping", "tool_calls": [{"tool": "sleep.wait", "arguments": {"seconds": 3.0}}]}


@pytest.fixture
def runtime(tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str) -> Iterator[RuntimeProcess]:
    text = f'db_url = "{sqlite_url}"\npoll_interval_s = 0.1\n'
    text += f'[[tool_hosts]]\nname = "local"\naddress = "{tool_host.address}"\n'
    text += agent_toml("quick", steps=[{"text": "done"}], tools=[], budgets={"timeout_s": 30})
    text += agent_toml(
        "refunder", steps=APPROVAL_STEPS, tools=["orders.lookup", "refund.issue"], budgets={"timeout_s": 60}
    )
    text += agent_toml(
        "careful",
        steps=[
            {"text": "one", "tool_calls": [LOOKUP]},
            {"text": "two", "tool_calls": [{"tool": "orders.lookup", "arguments": {"order_id": "A101"}}]},
            {"text": "both checked"},
        ],
        tools=["orders.lookup"],
        budgets={"max_tool_calls": 1, "timeout_s": 60},
    )
    text += 'on_budget_exhausted = "pause"\n'
    text += agent_toml(
        "napper", steps=[NAP, {"text": "rested"}], tools=["sleep.wait"], budgets={"timeout_s": 60}
    )
    path = tmp_path / "endings.toml"
    path.write_text(text)
    with spawn_runtime(["--config", str(path), "--listen", "127.0.0.1:0"], cwd=tmp_path) as process:
        yield process


def types(events: list[run_pb2.RunEvent]) -> list[str]:
    return [event_type(e) for e in events]


def test_a_follow_stream_of_an_ended_run_ends_at_once_whatever_after_seq(runtime: RuntimeProcess) -> None:
    with Client(runtime.address) as client:
        events = list(client.run_agent("quick", "hello", timeout=30))
        assert types(events)[-1] == "run.ended"
        run = client.get_run(events[0].run_id)
        last = run.last_seq
        assert last == events[-1].seq
        for after_seq in (last, last + 1, last + 10_000):
            started = time.monotonic()
            # Before the fix this hung until the deadline: DEADLINE_EXCEEDED, not an empty stream.
            tail = list(client.stream_events(run.run_id, after_seq=after_seq, follow=True, timeout=10))
            assert tail == [] and time.monotonic() - started < 5, (after_seq, types(tail))
        tail = list(client.stream_events(run.run_id, after_seq=last - 1, follow=True, timeout=10))
        assert types(tail) == ["run.ended"] and tail[0].seq == last
        whole = list(client.stream_events(run.run_id, follow=True, timeout=10))
        assert [e.seq for e in whole] == list(range(1, last + 1))


def test_runagent_ends_with_run_waiting_at_an_approval_and_a_follower_sees_the_end(
    runtime: RuntimeProcess,
) -> None:
    with Client(runtime.address) as client:
        events = list(client.run_agent("refunder", "refund A100 please", timeout=30))
        assert types(events)[-2:] == ["approval.requested", "run.waiting"], types(events)
        waiting, approval = events[-1].run_waiting, events[-2].approval_requested
        assert waiting.reason == run_pb2.WAIT_REASON_APPROVAL
        assert waiting.phase == run_pb2.RUN_PHASE_WAITING_APPROVAL
        assert waiting.detail == approval.approval_id and events[-1].seq == 0
        run_id = events[0].run_id
        # Stream-only: never stored, so a replay does not show it.
        replay = list(client.stream_events(run_id, timeout=10))
        assert "run.waiting" not in types(replay) and replay[-1].seq == events[-2].seq

        # The explicit follow keeps following through the wait, to the end.
        followed: list[run_pb2.RunEvent] = []
        follower = threading.Thread(
            target=lambda: followed.extend(client.stream_events(run_id, follow=True, timeout=60))
        )
        follower.start()
        run = client.get_run(run_id)
        client.resolve_approval(
            run_id,
            approval.approval_id,
            approve=True,
            args_hash=approval.args_hash,
            expected_revision=run.revision,
        )
        follower.join(60)
        assert not follower.is_alive()
        assert followed[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
        assert "approval.resolved" in types(followed) and "run.waiting" not in types(followed)
        seqs = [e.seq for e in followed if e.seq]
        assert seqs == list(range(1, len(seqs) + 1))

        # Attaching again with the same request returns the persisted story, past the old wait.
        after = list(client.stream_events(run_id, after_seq=events[-2].seq, follow=True, timeout=30))
        assert after[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED


def test_runagent_reattached_by_request_key_does_not_stop_at_an_old_wait(runtime: RuntimeProcess) -> None:
    with Client(runtime.address) as client:
        first = list(client.run_agent("refunder", "refund A100 please", request_key="k-old-wait", timeout=30))
        approval = first[-2].approval_requested
        run = client.get_run(first[0].run_id)
        client.resolve_approval(
            run.run_id, approval.approval_id, approve=True, args_hash=approval.args_hash,
            expected_revision=run.revision,
        )  # fmt: skip
        again = list(client.run_agent("refunder", "refund A100 please", request_key="k-old-wait", timeout=30))
        assert again[0].run_id == run.run_id
        assert again[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED, types(again)
        assert "run.waiting" not in types(again)


def test_runagent_ends_with_run_waiting_at_a_budget_pause(runtime: RuntimeProcess) -> None:
    with Client(runtime.address) as client:
        events = list(client.run_agent("careful", "check both", timeout=30))
        assert types(events)[-2:] == ["approval.requested", "run.waiting"], types(events)
        pause, waiting = events[-2].approval_requested, events[-1].run_waiting
        assert pause.call_id == "" and waiting.reason == run_pb2.WAIT_REASON_BUDGET
        assert waiting.detail == pause.approval_id
        run = client.get_run(events[0].run_id)
        client.resolve_approval(
            run.run_id, pause.approval_id, approve=True, args_hash=pause.args_hash,
            expected_revision=run.revision,
        )  # fmt: skip
        tail = list(client.stream_events(run.run_id, after_seq=events[-2].seq, follow=True, timeout=30))
        assert tail[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED, types(tail)


def test_runagent_ends_with_run_waiting_behind_an_earlier_turn_of_its_session(
    runtime: RuntimeProcess,
) -> None:
    with Client(runtime.address) as client:
        first = client.start_run("napper", "turn one", session_id="s-queue")
        events = list(
            client.run_agent("napper", "turn two", session_id="s-queue", session_policy="enqueue", timeout=30)
        )
        assert types(events) == ["run.started", "run.waiting"], types(events)
        waiting = events[-1].run_waiting
        assert waiting.reason == run_pb2.WAIT_REASON_SESSION_QUEUE
        assert waiting.phase == run_pb2.RUN_PHASE_QUEUED and waiting.detail == first.run_id
        # It did not wait for the first turn's nap (3 s): that turn is still going.
        assert client.get_run(first.run_id).phase != run_pb2.RUN_PHASE_COMPLETED
        second = events[0].run_id
        tail = list(client.stream_events(second, follow=True, timeout=30))
        assert tail[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
        assert client.get_run(first.run_id).phase == run_pb2.RUN_PHASE_COMPLETED
        # Waiting only for capacity or time is not a wait outside the run: RunAgent follows it.
        whole = list(client.run_agent("napper", "turn three", session_id="s-queue", timeout=30))
        assert whole[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED, types(whole)


def test_streams_of_unknown_runs_and_bad_after_seq_are_refused(runtime: RuntimeProcess) -> None:
    with Client(runtime.address) as client:
        with pytest.raises(RPCError) as missing:
            list(client.stream_events("0" * 32, follow=True, timeout=10))
        assert missing.value.code == grpc.StatusCode.NOT_FOUND
        run_id = client.start_run("quick", "hello").run_id
        with pytest.raises(RPCError) as negative:
            list(client.stream_events(run_id, after_seq=-1, follow=True, timeout=10))
        assert negative.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_runagent_ends_with_run_waiting_at_an_unknown_outcome_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugins = ["agentrt.plugins.demo_tools", "agentrt.plugins.fault_tools"]
    port = free_port()
    monkeypatch.setenv(FAULT_ENV, "after_effect:refund.issue")  # the host dies after the refund lands
    host = start_tool_host(tmp_path / "host", plugins=plugins, listen=f"127.0.0.1:{port}")
    monkeypatch.delenv(FAULT_ENV)
    with serve_fake_openai(REFUND_SCRIPT) as (_, model_url):
        env = runtime_env(
            db_url=f"sqlite:///{tmp_path / 'rt.sqlite'}",
            tool_host=host.address,
            model_url=model_url,
            query_timeout_s=0.5,
        )
        runtime = start_runtime(tmp_path, env)
        try:
            with Client(runtime.address) as client:
                # Before the fix this hung until the client's deadline.
                events = list(client.run_agent("refund", "refund A100", timeout=30))
                assert host.wait(30) == FAULT_EXIT_CODE
                assert types(events)[-2:] == ["tool.outcome.unknown", "run.waiting"], types(events)
                waiting = events[-1].run_waiting
                assert waiting.reason == run_pb2.WAIT_REASON_UNKNOWN_OUTCOME
                assert waiting.phase == run_pb2.RUN_PHASE_UNKNOWN_OUTCOME
                assert waiting.detail == events[-2].tool_outcome_unknown.call_id
                run_id = events[0].run_id
            host.stop()
            host = start_tool_host(tmp_path / "host", plugins=plugins, listen=f"127.0.0.1:{port}")
            with Client(runtime.address) as client:  # reconciliation settles it; a new stream sees the end
                tail = list(client.stream_events(run_id, after_seq=events[-2].seq, follow=True, timeout=60))
            assert tail[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED, types(tail)
        finally:
            runtime.close()
            host.stop()
