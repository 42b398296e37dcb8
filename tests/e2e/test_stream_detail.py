"""The ``detail`` option of RunAgent and StreamRunEvents (issue 19), through a real runtime over gRPC.

ALL is every event (text deltas included); MILESTONES leaves out model.text.delta, step.started
and run.checkpointed; FINAL sends only what ends a stream (run.ended, run.waiting,
cleanup.settled). Where a stream ends does not change, and what is sent keeps its order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from agentrt.client import Client, cli, event_type
from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2, runtime_service_pb2_grpc
from agentrt.testing import RuntimeProcess, ToolHostProcess, spawn_runtime
from tests.e2e.conftest import agent_toml

LOOKUP = {"tool": "orders.lookup", "arguments": {"order_id": "A100"}}
BIG_REFUND = {"tool": "refund.issue", "arguments": {"order_id": "A100", "amount": 30.0, "reason": "broken"}}
NOISE = {"model.text.delta", "step.started", "run.checkpointed"}


@pytest.fixture
def runtime(tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str) -> Iterator[RuntimeProcess]:
    text = f'db_url = "{sqlite_url}"\npoll_interval_s = 0.1\n'
    text += f'[[tool_hosts]]\nname = "local"\naddress = "{tool_host.address}"\n'
    text += agent_toml(
        "talker",
        steps=[
            {"text": "looking it up", "tool_calls": [LOOKUP], "deltas": True},
            {"text": "Your order has shipped today.", "deltas": True},
        ],
        tools=["orders.lookup"],
        budgets={"timeout_s": 30},
    )
    text += agent_toml(
        "refunder",
        steps=[{"text": "refunding", "tool_calls": [BIG_REFUND]}, {"text": "Refunded."}],
        tools=["refund.issue"],
        budgets={"timeout_s": 60},
    )
    path = tmp_path / "detail.toml"
    path.write_text(text)
    with spawn_runtime(["--config", str(path), "--listen", "127.0.0.1:0"], cwd=tmp_path) as process:
        yield process


def types(events: list[run_pb2.RunEvent]) -> list[str]:
    return [event_type(e) for e in events]


def persisted_seqs(events: list[run_pb2.RunEvent]) -> list[int]:
    return [e.seq for e in events if e.seq]


def test_run_agent_sends_each_detail_level_and_ends_where_it_did(runtime: RuntimeProcess) -> None:
    with Client(runtime.address) as client:
        every = list(client.run_agent("talker", "where is A100?", timeout=30))
        milestones = list(client.run_agent("talker", "where is A100?", timeout=30, detail="milestones"))
        final = list(client.run_agent("talker", "where is A100?", timeout=30, detail="final"))
        explicit_all = list(client.run_agent("talker", "where is A100?", timeout=30, detail="all"))
        logs = [list(client.stream_events(s[0].run_id)) for s in (every, milestones, final)]
    assert {"model.text.delta", "step.started"} <= set(types(every))
    assert types(explicit_all) == types(every)
    assert persisted_seqs(every) == list(range(1, every[-1].seq + 1))  # nothing left out
    assert not NOISE & set(types(milestones))
    assert {"run.started", "model.completed", "tool.started", "tool.completed"} <= set(types(milestones))
    # Milestones are the run's log without the noise: the same order, no gap, no duplicate but those.
    assert [(e.seq, event_type(e)) for e in milestones] == [
        (e.seq, event_type(e)) for e in logs[1] if event_type(e) not in NOISE
    ]
    assert types(final) == ["run.ended"] and final[0].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
    assert final[0].seq == logs[2][-1].seq  # its own seq: the others are skipped, not renumbered


def test_stream_run_events_replays_and_follows_with_a_detail(runtime: RuntimeProcess) -> None:
    with Client(runtime.address) as client:
        run = client.start_run("talker", "where is A100?")
        with client.stream_events(run.run_id, follow=True, detail="milestones", timeout=30) as followed:
            live = list(followed)
        log = list(client.stream_events(run.run_id))
        replayed = {d: list(client.stream_events(run.run_id, detail=d)) for d in ("milestones", "final")}
        resumed = list(client.stream_events(run.run_id, after_seq=live[1].seq, detail="milestones"))
    expected = [e.seq for e in log if event_type(e) not in NOISE]
    assert [e.seq for e in live] == expected == [e.seq for e in replayed["milestones"]]
    assert followed.ended is not None and followed.last_seq == log[-1].seq
    assert types(replayed["final"]) == ["run.ended"]
    assert [e.seq for e in resumed] == expected[2:]  # resuming after a sent seq: no gap, no duplicate


def test_final_run_agent_of_a_run_waiting_for_a_person_sends_only_run_waiting(
    runtime: RuntimeProcess,
) -> None:
    with Client(runtime.address) as client:
        stream = client.run_agent("refunder", "refund A100", timeout=30, detail="final")
        events = list(stream)
    assert types(events) == ["run.waiting"]
    assert events[0].run_waiting.reason == run_pb2.WAIT_REASON_APPROVAL
    assert stream.waiting is not None and stream.ended is None


def test_an_unknown_detail_is_invalid_argument_and_starts_nothing(runtime: RuntimeProcess) -> None:
    with grpc.insecure_channel(runtime.address) as channel:
        stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            list(stub.RunAgent(runtime_service_pb2.RunAgentRequest(agent_name="talker", input="x", detail=7)))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "detail" in (caught.value.details() or "")
        listed = stub.ListRuns(runtime_service_pb2.ListRunsRequest(), timeout=10)
        assert list(listed.runs) == []  # refused before the run was started
        started = stub.StartRun(
            runtime_service_pb2.StartRunRequest(agent_name="talker", input="x"), timeout=10
        )
        with pytest.raises(grpc.RpcError) as caught:
            request = runtime_service_pb2.StreamRunEventsRequest(run_id=started.run.run_id, detail=-1)
            list(stub.StreamRunEvents(request, timeout=10))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with Client(runtime.address) as client, pytest.raises(ValueError, match="detail"):
        client.stream_events(started.run.run_id, detail="some")


def test_the_cli_prints_the_detail_asked_for(
    runtime: RuntimeProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    target = ["--target", runtime.address, "--json"]
    assert cli.main([*target, "run", "talker", "where is A100?", "--follow", "--detail", "final"]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(printed) == 1 and "run_ended" in printed[0]
    run_id = printed[0]["run_id"]
    assert cli.main([*target, "events", run_id, "--detail", "milestones"]) == 0
    shown = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert shown and not any({"step_started", "model_text_delta", "run_checkpointed"} & set(e) for e in shown)
    assert "run_ended" in shown[-1] and any("model_completed" in e for e in shown)


def test_batch_events_packs_the_same_events_into_fewer_messages(runtime: RuntimeProcess) -> None:
    with grpc.insecure_channel(runtime.address) as channel:
        stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channel)
        single = list(stub.RunAgent(runtime_service_pb2.RunAgentRequest(agent_name="talker", input="x")))
        packed = list(
            stub.RunAgent(
                runtime_service_pb2.RunAgentRequest(agent_name="talker", input="x", batch_events=True)
            )
        )
        run_id = single[0].event.run_id
        replay = list(stub.StreamRunEvents(runtime_service_pb2.StreamRunEventsRequest(run_id=run_id)))
        replay_packed = list(
            stub.StreamRunEvents(runtime_service_pb2.StreamRunEventsRequest(run_id=run_id, batch_events=True))
        )
    assert all(r.HasField("event") and not r.events for r in single + replay)
    assert all(r.events and not r.HasField("event") for r in packed + replay_packed)
    unpacked = [e for r in packed for e in r.events]
    assert types(unpacked) == types([r.event for r in single])  # deltas included, in order
    assert persisted_seqs(unpacked) == list(range(1, unpacked[-1].seq + 1))
    assert len(packed) < len(unpacked)  # a commit's events travel together
    # A replay is what the store holds: the same messages, a page per response.
    assert [e for r in replay_packed for e in r.events] == [r.event for r in replay]
    assert len(replay_packed) == 1
