"""Cleanups (S002 §8) over real processes: a runtime, a tool host with the sandbox tools, a fake
OpenAI model. A run that created a sandbox destroys it before its end is committed, whether it
completes or is cancelled; a destroy that keeps failing leaves the run CLEANUP_UNKNOWN, listed by
ListRuns and ``agentrt list --cleanup-unknown``, and the background job releases it once the
sandbox service is back. What the job records after run.ended (the cleanup tail, closed by
cleanup.settled) reaches a follower that reads until its stream ends and every later reader.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agentrt.client import Client, event_type
from agentrt.client.cli import main as cli_main
from agentrt.plugins.sandbox_tools import DOWN_FLAG, live_sandboxes
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import start_tool_host
from tests.fault.conftest import runtime_env, serve_fake_openai, start_runtime

PLUGINS = ["agentrt.plugins.sandbox_tools", "agentrt.plugins.fault_tools"]
CREATE = {"tool": "sandbox.create", "arguments": {"purpose": "build"}}


def persisted(address: str, run_id: str, timeout: float = 60.0) -> list[run_pb2.RunEvent]:
    with Client(address) as client:
        return [e for e in client.stream_events(run_id, follow=True, timeout=timeout) if e.seq]


def test_a_completed_run_destroys_its_sandbox_before_its_end_is_committed(tmp_path: Path) -> None:
    host = start_tool_host(tmp_path / "host", plugins=PLUGINS)
    with serve_fake_openai({1: CREATE, 2: {"text": "Built."}}) as (fake, model_url):
        env = runtime_env(
            db_url=f"sqlite:///{tmp_path / 'rt.sqlite'}",
            tool_host=host.address,
            model_url=model_url,
            tools=("sandbox.create",),  # the model is never given sandbox.destroy: the runtime calls it
        )
        runtime = start_runtime(tmp_path, env)
        try:
            with Client(runtime.address) as client:
                run_id = client.start_run("refund", "build it").run_id
                events = persisted(runtime.address, run_id)
                run = client.get_run(run_id)
        finally:
            runtime.close()
            host.stop()
    types = [event_type(e) for e in events]
    assert types.index("tool.completed") + 1 == types.index("cleanup.registered")  # with the result
    closing = types.index("run.closing")
    tail = ["run.closing", "cleanup.started", "cleanup.completed", "run.completed", "run.ended"]
    assert types[closing:] == tail, types
    (registered,) = [e.cleanup_registered for e in events if e.HasField("cleanup_registered")]
    assert registered.kind == run_pb2.CLEANUP_KIND_TOOL and registered.target == "sandbox.destroy"
    assert len(registered.arguments.struct_value["sandbox_id"]) == 16  # the structured twin
    assert live_sandboxes(tmp_path / "host") == []
    assert run.phase == run_pb2.RUN_PHASE_COMPLETED and run.output == "Built."
    assert run.cleanup_status == run_pb2.CLEANUP_STATUS_DONE and run.cleanups_unknown == 0
    # The model saw the sandbox's id; the cleanup request is part of the recorded result.
    assert any("sandbox_id" in str(m.get("content")) for m in fake.bodies[-1]["messages"])


def test_a_cancelled_run_destroys_its_sandbox_then_ends_cancelled(tmp_path: Path) -> None:
    host = start_tool_host(tmp_path / "host", plugins=PLUGINS)
    stuck = {"tool": "flaky.transient", "arguments": {"delay_s": 0.2}}
    with serve_fake_openai({1: CREATE, 2: stuck, 3: {"text": "never"}}) as (_, model_url):
        env = runtime_env(
            db_url=f"sqlite:///{tmp_path / 'rt.sqlite'}",
            tool_host=host.address,
            model_url=model_url,
            tools=("sandbox.create", "flaky.transient"),
            tool_attempts=1000,
            retry_base_s=0.2,
            retry_cap_s=0.3,
        )
        runtime = start_runtime(tmp_path, env)
        try:
            with Client(runtime.address) as client:
                run_id = client.start_run("refund", "build it").run_id
                for event in client.stream_events(run_id, follow=True, timeout=30):
                    if event_type(event) == "retry.scheduled":
                        break
                assert live_sandboxes(tmp_path / "host")  # made, and held while the run works
                client.cancel_run(run_id, reason="user gave up")
                events = persisted(runtime.address, run_id)
                run = client.get_run(run_id)
        finally:
            runtime.close()
            host.stop()
    types = [event_type(e) for e in events]
    assert types[-2:] == ["run.cancelled", "run.ended"], types
    assert types.index("cancel.requested") < types.index("run.closing") < types.index("cleanup.completed")
    (closing,) = [e.run_closing for e in events if e.HasField("run_closing")]
    assert closing.phase == run_pb2.RUN_PHASE_CANCELLED
    assert live_sandboxes(tmp_path / "host") == []
    assert run.cleanup_status == run_pb2.CLEANUP_STATUS_DONE


def test_a_cleanup_that_fails_is_listed_then_released_by_the_job_and_every_follower_sees_the_tail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host = start_tool_host(tmp_path / "host", plugins=PLUGINS)
    flag = tmp_path / "host" / "sandboxes" / DOWN_FLAG
    flag.parent.mkdir(parents=True, exist_ok=True)
    flag.touch()  # the sandbox service is down from the start
    with serve_fake_openai({1: CREATE, 2: {"text": "Built."}}) as (_, model_url):
        env = runtime_env(
            db_url=f"sqlite:///{tmp_path / 'rt.sqlite'}",
            tool_host=host.address,
            model_url=model_url,
            tools=("sandbox.create",),
            retry_base_s=0.05,
            retry_cap_s=0.1,
            cleanup={"attempts": 2, "deadline_s": 5, "retry_interval_s": 0.5, "retry_cap_s": 1},
        )
        runtime = start_runtime(tmp_path, env)
        try:
            with Client(runtime.address) as client, ThreadPoolExecutor(1) as pool:
                agent = client.run_agent("refund", "build it", timeout=60)
                first = next(agent)
                run_id = first.run_id
                # A follower from the start that reads until the stream ends, whatever it takes.
                following = pool.submit(follow_to_the_end, runtime.address, run_id)
                answer = [first, *agent]  # RunAgent: the answer does not wait for the cleanup job
                ended = client.get_run(run_id)
                with client.stream_events(run_id) as replay:  # a later reader, while the tail is open
                    replayed = list(replay)
                with client.stream_events(run_id, follow=True, cleanup_tail=False, timeout=30) as outcome:
                    to_outcome = list(outcome)
                listed = [r.run_id for r in client.list_runs(cleanup_unknown=True).runs]
                assert cli_main(["list", "--cleanup-unknown", "--target", runtime.address]) == 0
                printed = capsys.readouterr().out
                assert live_sandboxes(tmp_path / "host")  # still there: nobody could destroy it
                assert not following.done()  # the tail is open: the follower is still following
                flag.unlink()  # the service is back
                followed = following.result(timeout=30)  # ends by itself, at cleanup.settled
                run = client.get_run(run_id)
                after = [r.run_id for r in client.list_runs(cleanup_unknown=True).runs]
                log = list(client.stream_events(run_id))
                ended_seq = next(e.seq for e in log if e.HasField("run_ended"))
                late = {
                    (after_seq, follow): list(
                        client.stream_events(run_id, after_seq=after_seq, follow=follow, timeout=10)
                    )
                    for after_seq in (ended_seq - 1, ended_seq, log[-1].seq)
                    for follow in (True, False)
                }
        finally:
            runtime.close()
            host.stop()
    types = [event_type(e) for e in answer]
    assert types[-3:] == ["run.completed", "run.ended", "run.waiting"]  # the answer stands, tail open
    assert agent.tail_open and agent.waiting is not None and agent.waiting.detail == "1"
    assert agent.ended is not None and agent.ended.phase == run_pb2.RUN_PHASE_COMPLETED
    failed = [e.cleanup_failed for e in answer if e.HasField("cleanup_failed")]
    assert [f.final for f in failed] == [False, True] and "sandbox service down" in failed[-1].message
    assert ended.phase == run_pb2.RUN_PHASE_COMPLETED
    assert ended.cleanup_status == run_pb2.CLEANUP_STATUS_UNKNOWN and ended.cleanups_unknown == 1
    assert event_type(replayed[-1]) == "run.waiting" and replay.tail_open  # typed: not complete yet
    assert event_type(to_outcome[-1]) == "run.waiting" and outcome.tail_open and outcome.ended is not None
    assert listed == [run_id]
    assert run_id in printed and "CLEANUP_UNKNOWN(1)" in printed
    # The background job released it.
    assert run.cleanup_status == run_pb2.CLEANUP_STATUS_DONE and run.cleanups_unknown == 0
    assert run.phase == run_pb2.RUN_PHASE_COMPLETED and run.output == "Built."
    assert live_sandboxes(tmp_path / "host") == []
    assert after == []
    # The follower saw every record of the run once, in order: the job's retries after run.ended
    # (each failed pass while the service was down, then the release), closed by cleanup.settled.
    recorded = [e for e in followed if e.seq]
    assert [e.seq for e in recorded] == [e.seq for e in log] == list(range(1, len(log) + 1))
    assert [e.SerializeToString() for e in recorded] == [e.SerializeToString() for e in log]
    tail = [event_type(e) for e in log if e.seq > ended_seq]
    assert tail[-3:] == ["cleanup.started", "cleanup.completed", "cleanup.settled"], tail
    assert all(t.startswith("cleanup.") for t in tail)
    marks = [i for i, e in enumerate(followed) if e.HasField("run_waiting")]
    assert len(marks) == 1 and followed[marks[0] - 1].seq >= ended_seq  # where the tail began, once
    assert run_pb2.WaitReason.Name(followed[marks[0]].run_waiting.reason) == "WAIT_REASON_CLEANUP"
    # Readers attaching after the end get the tail exactly once, follow or not, and then the end.
    for (after_seq, _), got in late.items():
        assert [e.seq for e in got] == list(range(after_seq + 1, log[-1].seq + 1)), (after_seq, got)


def follow_to_the_end(address: str, run_id: str) -> list[run_pb2.RunEvent]:
    with Client(address) as client:
        return list(client.stream_events(run_id, follow=True, timeout=60))
