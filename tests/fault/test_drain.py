"""Drains on SIGTERM, on real processes and PostgreSQL.

A runtime replica stops claiming, reports NOT_SERVING, lets each run reach its next commit and
hands it over in that fenced commit, so another replica claims it on its next poll rather than
after the lease TTL (5 s here). A tool host refuses new calls retryably while its calls in flight
finish, then exits 0.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from agentrt.client import Client, event_type
from agentrt.plugins.fault_tools import count_slow_writes
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.proto.toolhost.v1.tool_host_service_pb2 import GetOperationRequest, InvokeToolRequest
from agentrt.proto.toolhost.v1.tool_host_service_pb2_grpc import ToolHostServiceStub
from agentrt.server.core import LedgerSilence, ToolErrorCode
from agentrt.server.tools import CallMetadata, ToolRouter
from agentrt.testing import RuntimeProcess, ToolHostProcess, spawn_tool_host
from agentrt.toolhost._ledger import Ledger, OperationStatus
from tests.fault.conftest import follow_to_end, runtime_env, serve_fake_openai, start_runtime
from tests.fault.test_replicas import SLOW_WRITE_THEN_DONE, key_of_started, wait_running_on_host

TOOLS = ("sleep.wait", "slow.write")
TTL_S = 5.0  # a takeover that waited for the lease would take this long
TERMINAL = {
    run_pb2.RUN_PHASE_COMPLETED,
    run_pb2.RUN_PHASE_FAILED,
    run_pb2.RUN_PHASE_CANCELLED,
    run_pb2.RUN_PHASE_EXPIRED,
}


def long_script(steps: int) -> dict[int, dict[str, Any]]:
    """Short reads and writes in turn, then an answer: a run of many commits, a few seconds long."""
    script: dict[int, dict[str, Any]] = {}
    for step in range(1, steps):
        if step % 2:
            script[step] = {"tool": "sleep.wait", "arguments": {"seconds": 0.3 + step / 1000}}
        else:
            script[step] = {"tool": "slow.write", "arguments": {"seconds": 0.15, "note": f"step {step}"}}
    script[steps] = {"text": "All done."}
    return script


def replica_env(base: dict[str, str], worker_id: str, **settings: Any) -> dict[str, str]:
    settings = {"lease_ttl_s": TTL_S, "grace_s": 5.0, **settings}
    env = runtime_env(**base, tools=TOOLS, worker_id=worker_id, **settings)
    agents = json.loads(env["AGENTRT_AGENTS"])
    agents["refund"]["budgets"]["max_model_steps"] = 40
    env["AGENTRT_AGENTS"] = json.dumps(agents)
    return env


def wait_owned_elsewhere(
    address: str, run_ids: list[str], drained: str, since: float, timeout: float = 15.0
) -> tuple[float, set[str]]:
    """Until the runs (listed on ``address``, one ListRuns a round) are each owned by a replica
    other than ``drained``, or ended; (seconds from ``since`` to the last of them, the owners)."""
    pending, last, owners = set(run_ids), since, set()
    deadline = time.monotonic() + timeout
    with Client(address) as client:
        while pending:
            listed = {r.run_id: r for r in client.list_runs(page_size=100).runs}
            seen_at = time.time()
            for run_id in sorted(pending):
                run = listed[run_id]
                if run.lease_owner not in ("", drained):
                    assert run.lease_expire_time.ToMilliseconds() > seen_at * 1000  # a live lease
                    owners.add(run.lease_owner)
                elif run.phase not in TERMINAL:
                    continue
                pending.discard(run_id)
                last = seen_at
            assert time.monotonic() < deadline, f"still not taken from {drained}: {sorted(pending)}"
            time.sleep(0.01)
    return last - since, owners


def wait_owned_by(address: str, run_ids: list[str], owner: str, timeout: float = 15.0) -> None:
    """Until GetRun (on ``address``) shows every run owned by ``owner``."""
    deadline = time.monotonic() + timeout
    with Client(address) as client:
        while {client.get_run(run_id).lease_owner for run_id in run_ids} != {owner}:
            assert time.monotonic() < deadline, f"not all owned by {owner}"
            time.sleep(0.02)


def drain(
    owner: RuntimeProcess, owner_id: str, asker: RuntimeProcess, run_ids: list[str]
) -> tuple[float, float]:
    """SIGTERM ``owner``; (seconds until other replicas own its runs, seconds until it exited 0)."""
    with Client(asker.address) as client:
        runs = [client.get_run(r) for r in run_ids]
    live = [r.run_id for r in runs if r.lease_owner == owner_id]
    assert live, f"{owner_id} owns no run: {[(r.lease_owner, r.phase, r.reason) for r in runs]}"
    sigterm_at = time.time()
    owner.process.send_signal(signal.SIGTERM)
    takeover_s, _ = wait_owned_elsewhere(asker.address, live, owner_id, sigterm_at)
    assert owner.wait_exit(timeout=20) == 0, owner.stderr_text()[-2000:]
    return takeover_s, time.time() - sigterm_at


def health_of(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        check = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=5
        )
        return int(check.status)


def wait_not_serving(address: str, within: float = 2.0) -> float:
    """Seconds until health reports NOT_SERVING."""
    began = time.monotonic()
    while health_of(address) != health_pb2.HealthCheckResponse.NOT_SERVING:
        assert time.monotonic() - began < within, "still SERVING"
        time.sleep(0.01)
    return time.monotonic() - began


# -- runtime replicas ----------------------------------------------------------------------------------

RUNS = 10
STEPS = 36  # 35 tool calls: about 8 s per run, across both restarts


def test_a_rolling_restart_hands_every_run_over_in_under_a_second_and_fails_none(
    tmp_path: Path, refund_host: ToolHostProcess, pg_url: str
) -> None:
    """Surge then drain, replica by replica, as a Deployment's rolling update does."""
    with serve_fake_openai(long_script(STEPS)) as (_, model_url):
        base = {"db_url": pg_url, "tool_host": refund_host.address, "model_url": model_url}
        replicas = [start_runtime(tmp_path, replica_env(base, name)) for name in ("a", "b", "a2")]
        a, b, a2 = replicas
        try:
            with Client(a.address) as client:
                run_ids = [client.start_run("refund", f"job {i}").run_id for i in range(RUNS)]
            # GetRun on another replica names the owner, read from the run's row.
            wait_owned_by(b.address, run_ids, "a")
            with Client(b.address) as client:
                assert client.get_run_diagnostics(run_ids[0]).lease_owner == "a"
            figures = [drain(a, "a", a2, run_ids)]
            replicas.append(b2 := start_runtime(tmp_path, replica_env(base, "b2")))
            figures.append(drain(b, "b", b2, run_ids))
            logs = {run_id: follow_to_end(b2.address, run_id, timeout=90) for run_id in run_ids}
            with Client(a2.address) as client:
                ended = [client.get_run(run_id) for run_id in run_ids]
        finally:
            for replica in replicas:
                replica.close()
    for takeover_s, exit_s in figures:
        print(
            f"\nSIGTERM of an owner (lease TTL {TTL_S:g} s, poll 0.1 s): other replicas owned "
            f"its runs {takeover_s * 1000:.0f} ms after; it exited 0 {exit_s:.2f} s after"
        )
    assert all(takeover_s < 1.0 for takeover_s, _ in figures), figures
    assert [r.phase for r in ended] == [run_pb2.RUN_PHASE_COMPLETED] * RUNS
    assert all(r.lease_owner == "" and not r.HasField("lease_expire_time") for r in ended)
    keys: list[str] = []
    for run_id, events in logs.items():
        stored = [e for e in events if e.seq]
        assert [e.seq for e in stored] == list(range(1, len(stored) + 1)), run_id
        types = [event_type(e) for e in stored]
        assert "cancel.requested" not in types and "tool.failed" not in types, types
        keys += sorted(
            {
                e.tool_started.idempotency_key
                for e in stored
                if e.HasField("tool_started") and e.tool_started.tool == "slow.write"
            }
        )
    assert len(keys) == RUNS * ((STEPS - 1) // 2)  # every write of every run, once each
    assert {key: count_slow_writes(refund_host.data_dir, key) for key in keys} == dict.fromkeys(keys, 1)
    assert count_slow_writes(refund_host.data_dir) == len(keys)  # 0 duplicate writes


def test_a_write_in_flight_at_the_drain_deadline_is_reconciled_by_the_next_owner_never_cancelled(
    tmp_path: Path, refund_host: ToolHostProcess, pg_url: str
) -> None:
    """The 3 s write outlasts the owner's 0.5 s drain: it is cut without a word, and the heir asks
    the host's ledger what it did. Meanwhile the draining replica still answers, and a StartRun
    it accepts is left for the other replica."""
    with serve_fake_openai(SLOW_WRITE_THEN_DONE) as (fake, model_url):
        base = {"db_url": pg_url, "tool_host": refund_host.address, "model_url": model_url}
        owner = start_runtime(tmp_path, replica_env(base, "a", grace_s=0.5))
        heir = start_runtime(tmp_path, replica_env(base, "b"))
        try:
            with Client(owner.address) as client:
                run_id = client.start_run("refund", "Please refund A100").run_id
            key = key_of_started(owner.address, run_id, "slow.write")
            wait_running_on_host(refund_host.data_dir, key)
            sigterm_at = time.time()
            owner.process.send_signal(signal.SIGTERM)
            not_serving_s = wait_not_serving(owner.address)
            with Client(owner.address) as client:
                assert client.get_run(run_id).lease_owner == "a"  # still answered, still its
                read = [event_type(e) for e in client.stream_events(run_id, timeout=5)]
                assert read[-1] == "tool.started", read  # the log is still served
                late = client.start_run("refund", "Please refund B200")
            assert late.lease_owner == ""  # persisted, owned by nobody: the other replica takes it
            assert owner.wait_exit(timeout=20) == 0, owner.stderr_text()[-2000:]
            exit_s = time.time() - sigterm_at
            events = [e for e in follow_to_end(heir.address, run_id, timeout=60) if e.seq]
            late_events = follow_to_end(heir.address, late.run_id, timeout=60)
        finally:
            owner.close()
            heir.close()
    types = [event_type(e) for e in events]
    with Ledger(refund_host.data_dir / "ledger.sqlite", owner="test-reader") as ledger:
        record = ledger.get(key)
    assert record is not None
    print(
        f"\nSIGTERM with a 3 s write in flight, drain 0.5 s: "
        f"NOT_SERVING after {not_serving_s * 1000:.0f} ms, "
        f"exit 0 after {exit_s:.2f} s; host executions={record.executions}; events={types}"
    )
    assert exit_s < 0.5 + 1.0 + 2.0  # grace_s + rpc_grace_s + closing
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED, types
    assert count_slow_writes(refund_host.data_dir, key) == 1
    assert record.executions == 1 and record.status is OperationStatus.SUCCEEDED
    assert "cancel.requested" not in types and "run.cancelled" not in types and "tool.failed" not in types
    started = [e for e in events if e.HasField("tool_started")]
    assert {e.tool_started.idempotency_key for e in started} == {key}
    told = [m for m in fake.bodies[-1]["messages"] if m["role"] == "tool"]
    assert "CANCELLED" not in told[-1]["content"] and "refund A100" in told[-1]["content"]
    assert late_events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED


# -- tool host ----------------------------------------------------------------------------------------


def _invoke(stub: ToolHostServiceStub, key: str, seconds: float) -> Any:
    arguments = json.dumps({"seconds": seconds, "note": key})
    request = InvokeToolRequest(tool="slow.write", arguments_json=arguments)
    return stub.InvokeTool.future(request, metadata=[("x-agentrt-idempotency-key", key)], timeout=30)


def call_of(key: str) -> CallMetadata:
    return CallMetadata(idempotency_key=key, run_id="r1", call_id=key, attempt=1, fencing_token=1)


async def test_a_draining_tool_host_finishes_its_call_refuses_new_ones_retryably_and_exits_0(
    tmp_path: Path,
) -> None:
    router = ToolRouter()
    with (
        spawn_tool_host(
            tmp_path, plugins=["agentrt.plugins.fault_tools"], extra_args=["--grace", "10"]
        ) as host,
        grpc.insecure_channel(host.address) as channel,
    ):
        try:
            await router.add_host("pool", host.address)
            stub = ToolHostServiceStub(channel)
            in_flight = _invoke(stub, "in-flight", 1.5)
            wait_running_on_host(tmp_path, "in-flight")
            sigterm_at = time.monotonic()
            host.terminate()
            wait_not_serving(host.address)
            with pytest.raises(grpc.RpcError) as refused:
                _invoke(stub, "too-late", 0.1).result()
            # What the runtime makes of it: provably never sent (the host's typed word), with the
            # host's RetryInfo delay; and the draining host still answers that it has no such call.
            arguments = json.dumps({"seconds": 0.1, "note": "routed"})
            routed = await router.invoke("slow.write", arguments, metadata=call_of("routed"), timeout_s=5)
            word = await router.query("slow.write", arguments, metadata=call_of("routed"), timeout_s=5)
            asked = stub.GetOperation(GetOperationRequest(idempotency_key="in-flight"), timeout=5)
            assert in_flight.result().result_json  # finished, within the grace
            code = host.wait(timeout=15)
            exited_s = time.monotonic() - sigterm_at
        finally:
            await router.close()
    assert code == 0
    error = refused.value
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    status = rpc_status.from_call(error)
    assert status is not None
    info, retry = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
    assert status.details[0].Unpack(info) and info.reason == "DRAINING"
    assert status.details[1].Unpack(retry) and retry.retry_delay.seconds == 10
    assert routed.code is ToolErrorCode.TRANSIENT and routed.never_sent and not routed.in_doubt
    assert routed.retry_after_s == 10.0  # a lone host: its RetryInfo is the earliest retry
    assert word is LedgerSilence.NOT_FOUND
    assert asked.operation.idempotency_key == "in-flight"
    with Ledger(tmp_path / "ledger.sqlite", owner="reader") as ledger:
        assert ledger.get("too-late") is None and ledger.get("routed") is None  # nothing recorded
        done = ledger.get("in-flight")
    assert done is not None and done.status is OperationStatus.SUCCEEDED
    assert count_slow_writes(tmp_path) == 1
    assert 1.0 < exited_s < 10.0  # it waited for its call, not for the whole grace
