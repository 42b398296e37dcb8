"""Admission control at StartRun/RunAgent against a real runtime process, SQLite and PostgreSQL.

Over a limit (queued runs globally or per tenant, runs not ended per tenant) the answer is
RESOURCE_EXHAUSTED with ErrorInfo and RetryInfo, and nothing is written; one tenant at its limit
does not block another; a repeated request_key attaches to its run whatever the counts; under
concurrent starts the per-tenant limit is exact.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status
from sqlalchemy import create_engine, text

from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2, runtime_service_pb2_grpc
from agentrt.server.store import normalise_url
from agentrt.testing import RuntimeProcess, spawn_runtime
from tests.e2e.conftest import agent_toml

TENANTS = {"acme": "tok-acme-admission", "globex": "tok-globex-admission"}
# A model call that lasts longer than any test: the run stays active until cancelled.
SLOW = [{"text": "done", "delay_s": 120}]


def config(tmp_path: Path, db_url: str, admission: str, *, max_concurrent_runs: int) -> Path:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(
        "".join(
            f'[[tokens]]\nsha256 = "{hashlib.sha256(tok.encode()).hexdigest()}"\n'
            f'subject = "{tenant}-runner"\ntenant = "{tenant}"\nroles = ["runner", "operator"]\n'
            for tenant, tok in TENANTS.items()
        )
    )
    path = tmp_path / "agentrt.toml"
    path.write_text(
        f'db_url = "{db_url}"\npoll_interval_s = 0.1\nlease_ttl_s = 3.0\ngrace_s = 0.5\n'
        f"max_concurrent_runs = {max_concurrent_runs}\n"
        f'[auth]\ntokens_file = "{tokens}"\n[admission]\n{admission}\n'
        + agent_toml("slow", steps=SLOW, tools=[], budgets={"timeout_s": 300})
    )
    return path


@pytest.fixture
def spawn(tmp_path: Path, db_url: str) -> Iterator[Any]:
    processes: list[Any] = []

    def start(admission: str, *, max_concurrent_runs: int = 50) -> RuntimeProcess:
        path = config(tmp_path, db_url, admission, max_concurrent_runs=max_concurrent_runs)
        manager = spawn_runtime(["--config", str(path), "--listen", "127.0.0.1:0"], cwd=tmp_path)
        processes.append(manager)
        return manager.__enter__()

    yield start
    for manager in processes:
        manager.__exit__(None, None, None)


class Caller:
    """One tenant's view of the runtime over a plain loopback channel."""

    def __init__(self, address: str, tenant: str) -> None:
        self.channel = grpc.insecure_channel(address)
        self.stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(self.channel)
        self.metadata = (("authorization", f"Bearer {TENANTS[tenant]}"),)

    def start(self, *, key: str = "", session: str = "", policy: int = 0) -> run_pb2.Run:
        request = runtime_service_pb2.StartRunRequest(
            agent_name="slow", input="hi", request_key=key, session_id=session, session_policy=policy
        )
        response = self.stub.StartRun(request, metadata=self.metadata, timeout=20)
        return response.run

    def run_agent(self, *, key: str = "") -> list[Any]:
        request = runtime_service_pb2.RunAgentRequest(agent_name="slow", input="hi", request_key=key)
        return list(self.stub.RunAgent(request, metadata=self.metadata, timeout=20))

    def runs(self) -> list[run_pb2.Run]:
        reply = self.stub.ListRuns(
            runtime_service_pb2.ListRunsRequest(page_size=100), metadata=self.metadata, timeout=20
        )
        return list(reply.runs)

    def get(self, run_id: str) -> run_pb2.Run:
        request = runtime_service_pb2.GetRunRequest(run_id=run_id)
        return self.stub.GetRun(request, metadata=self.metadata, timeout=20).run

    def cancel(self, run_id: str) -> None:
        request = runtime_service_pb2.CancelRunRequest(run_id=run_id, reason="test")
        self.stub.CancelRun(request, metadata=self.metadata, timeout=20)

    def wait_phase(self, run_id: str, done: Any, timeout: float = 30.0) -> run_pb2.Run:
        end = time.monotonic() + timeout
        while True:
            run = self.get(run_id)
            if done(run.phase) or time.monotonic() > end:
                assert done(run.phase), f"run {run_id} stayed {run_pb2.RunPhase.Name(run.phase)}"
                return run
            time.sleep(0.05)

    def close(self) -> None:
        self.channel.close()


def refusal(call: Any) -> tuple[str, dict[str, str], float]:
    """The reason, metadata and retry delay of a RESOURCE_EXHAUSTED answer."""
    with pytest.raises(grpc.RpcError) as caught:
        call()
    error = caught.value
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
    status = rpc_status.from_call(error)
    assert status is not None
    info, retry = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
    assert any(d.Unpack(info) for d in status.details)
    assert any(d.Unpack(retry) for d in status.details), "no RetryInfo"
    assert info.domain == "runtime.agentrt"
    return info.reason, dict(info.metadata), retry.retry_delay.ToTimedelta().total_seconds()


def rows(db_url: str) -> tuple[int, int]:
    """(runs, events) in the database: what a refused call must not change."""
    engine = create_engine(normalise_url(db_url))
    try:
        with engine.connect() as conn:
            counts = (
                conn.execute(text("SELECT count(*) FROM runs")).scalar_one(),
                conn.execute(text("SELECT count(*) FROM run_events")).scalar_one(),
            )
    finally:
        engine.dispose()
    return int(counts[0]), int(counts[1])


def not_queued(phase: int) -> bool:
    return phase != run_pb2.RUN_PHASE_QUEUED


def test_queued_limits_per_tenant_and_global_refuse_and_write_nothing(spawn: Any, db_url: str) -> None:
    # One worker slot: the first run runs, every later one waits QUEUED.
    runtime = spawn(
        "max_queued_runs = 3\nmax_queued_runs_per_tenant = 2\nmax_active_runs_per_tenant = 100\n"
        "retry_after_s = 2.5",
        max_concurrent_runs=1,
    )
    acme, globex = Caller(runtime.address, "acme"), Caller(runtime.address, "globex")
    try:
        first = acme.start()
        acme.wait_phase(first.run_id, not_queued)
        keyed = acme.start(key="k-2")
        acme.start()
        assert [r.phase for r in acme.runs()].count(run_pb2.RUN_PHASE_QUEUED) == 2
        before = rows(db_url)

        reason, metadata, delay = refusal(acme.start)
        assert (reason, metadata, delay) == ("TOO_MANY_QUEUED_RUNS", {"scope": "tenant", "limit": "2"}, 2.5)
        assert refusal(acme.run_agent)[0] == "TOO_MANY_QUEUED_RUNS"  # RunAgent is admitted the same way
        assert refusal(lambda: acme.start(key="k-new"))[0] == "TOO_MANY_QUEUED_RUNS"
        assert rows(db_url) == before and len(acme.runs()) == 3

        # A repeated request_key attaches to its run: admission never refuses it.
        assert acme.start(key="k-2").run_id == keyed.run_id
        # acme at its limit does not block globex ...
        globex.start()
        # ... until the server's queue is full: 3 queued runs of all tenants.
        before = rows(db_url)
        reason, metadata, _ = refusal(globex.start)
        assert (reason, metadata) == ("TOO_MANY_QUEUED_RUNS", {"scope": "global", "limit": "3"})
        assert rows(db_url) == before and len(globex.runs()) == 1
    finally:
        acme.close()
        globex.close()


def test_active_runs_per_tenant_count_until_a_run_ends(spawn: Any, db_url: str) -> None:
    runtime = spawn("max_active_runs_per_tenant = 2")
    acme, globex = Caller(runtime.address, "acme"), Caller(runtime.address, "globex")
    try:
        runs = [acme.start(session="s-1"), acme.start()]
        for run in runs:
            acme.wait_phase(run.run_id, not_queued)  # running, not queued: only the active limit binds
        before = rows(db_url)

        reason, metadata, delay = refusal(acme.start)
        assert (reason, metadata, delay) == ("TOO_MANY_ACTIVE_RUNS", {"scope": "tenant", "limit": "2"}, 1.0)
        assert refusal(acme.run_agent)[0] == "TOO_MANY_ACTIVE_RUNS"
        # A refused turn that would interrupt its session's active run leaves that run alone.
        interrupt = runtime_service_pb2.SESSION_POLICY_INTERRUPT
        assert refusal(lambda: acme.start(session="s-1", policy=interrupt))[0] == "TOO_MANY_ACTIVE_RUNS"
        assert rows(db_url) == before
        assert acme.get(runs[0].run_id).phase == run_pb2.RUN_PHASE_MODEL_STEP
        globex.start()  # another tenant is not affected

        acme.cancel(runs[0].run_id)
        ended = acme.wait_phase(runs[0].run_id, lambda p: p == run_pb2.RUN_PHASE_CANCELLED)
        assert ended.phase == run_pb2.RUN_PHASE_CANCELLED
        acme.start()  # an ended run no longer counts
        assert refusal(acme.start)[0] == "TOO_MANY_ACTIVE_RUNS"
    finally:
        acme.close()
        globex.close()


async def test_concurrent_starts_admit_exactly_the_per_tenant_limit(spawn: Any, db_url: str) -> None:
    runtime = spawn("max_active_runs_per_tenant = 5")
    metadata = (("authorization", f"Bearer {TENANTS['acme']}"),)
    async with grpc.aio.insecure_channel(runtime.address) as channel:
        stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channel)

        async def one(n: int) -> str:
            request = runtime_service_pb2.StartRunRequest(agent_name="slow", input=f"hi {n}")
            try:
                await stub.StartRun(request, metadata=metadata, timeout=30)
            except grpc.aio.AioRpcError as exc:
                return exc.code().name
            return "OK"

        outcomes = await asyncio.gather(*(one(n) for n in range(20)))

    assert sorted(outcomes).count("OK") == 5, outcomes
    assert outcomes.count("RESOURCE_EXHAUSTED") == 15, outcomes
    assert rows(db_url)[0] == 5
