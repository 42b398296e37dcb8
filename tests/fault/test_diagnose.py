"""``agentrt diagnose`` on a run stuck in UNKNOWN_OUTCOME, over real processes (GetRunDiagnostics).

The refund's tool host applies the refund and dies before it answers; its port then holds a
socket that accepts connections and never speaks, so each ledger query of the runtime (replica
``replica-a``) hangs for its query timeout while the replica holds the run, then the run parks
until its next reconcile. The real CLI (its ``main``) shows both moments: the owner, its lease
expiry and fencing generation while the query runs; the next reconcile time while parked; the
call's attempts and the reconcile attempts in both. Auth is static bearer tokens: only the
operator role may diagnose, and only its tenant's runs. Last, on PostgreSQL with two replicas:
a run whose owner was killed shows that owner and its lease as lapsed, from the other replica.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import psycopg
import pytest
from google.protobuf import timestamp_pb2
from google.rpc import error_details_pb2  # type: ignore[import-untyped]

from agentrt.client import (
    AsyncClient,
    Client,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    RPCError,
    cli,
)
from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2
from agentrt.testing import RuntimeProcess, ToolHostProcess, start_tool_host
from agentrt.toolhost._faults import FAULT_ENV, FAULT_EXIT_CODE
from tests.conftest import PG_ADMIN_URL
from tests.fault.conftest import REFUND_SCRIPT, free_port, runtime_env, serve_fake_openai, start_runtime

PLUGINS = ["agentrt.plugins.demo_tools", "agentrt.plugins.fault_tools"]
WORKER = "replica-a"
QUERY_TIMEOUT_S = 2.0  # how long each ledger query holds the run (the host never answers)
CAP_S = 0.6  # reconcile backoff cap: the run is parked at most this long between queries
TOKENS = {  # name: (tenant, roles)
    "alice": ("acme", ["runner"]),
    "ops": ("acme", ["operator"]),
    "boss": ("acme", ["admin"]),
    "watcher": ("acme", ["runner", "approver"]),
    "globex-ops": ("globex", ["operator"]),
}


@dataclass
class Stuck:
    db_url: str
    runtime: RuntimeProcess
    run_id: str
    tokens: dict[str, str]
    idempotency_key: str

    def client(self, who: str) -> Client:
        return Client(self.runtime.address, token=self.tokens[who], timeout=20)

    def cli(self, who: str, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
        code = cli.main(["--target", self.runtime.address, "--token", self.tokens[who], *args])
        out, err = capsys.readouterr()
        return code, out, err


def wait_for(check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def write_tokens(path: Path) -> dict[str, str]:
    tokens = {name: f"tok-{name}-{hashlib.sha256(name.encode()).hexdigest()[:16]}" for name in TOKENS}
    text = ""
    for name, (tenant, roles) in TOKENS.items():
        digest = hashlib.sha256(tokens[name].encode()).hexdigest()
        text += (
            f'[[tokens]]\nsha256 = "{digest}"\nsubject = "{name}"\ntenant = "{tenant}"\n'
            f"roles = {json.dumps(roles)}\n"
        )
    path.write_text(text)
    return tokens


@contextlib.contextmanager
def black_hole(port: int) -> Iterator[socket.socket]:
    """A listener on ``port`` that completes TCP handshakes (the kernel does) and never answers."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    try:
        yield sock
    finally:
        sock.close()


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('db') / 'rt.sqlite'}"
    database = request.getfixturevalue("pg_database")
    schema = f"diag_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return f"{database}?options=-csearch_path%3D{schema}"


@pytest.fixture(scope="module")
def stuck(tmp_path_factory: pytest.TempPathFactory, db_url: str) -> Iterator[Stuck]:
    tmp_path = tmp_path_factory.mktemp("diagnose")
    tokens = write_tokens(tmp_path / "tokens.toml")
    port = free_port()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(FAULT_ENV, "after_effect:refund.issue")
        host: ToolHostProcess = start_tool_host(
            tmp_path / "host", plugins=PLUGINS, listen=f"127.0.0.1:{port}"
        )
    try:
        with serve_fake_openai(REFUND_SCRIPT) as (_, model_url):
            env = runtime_env(
                db_url=db_url,
                tool_host=host.address,
                model_url=model_url,
                query_timeout_s=QUERY_TIMEOUT_S,
                timeout_s=3600,
                reconcile={"base_s": CAP_S / 2, "cap_s": CAP_S},
                worker_id=WORKER,
                auth={"tokens_file": str(tmp_path / "tokens.toml")},
            )
            runtime = start_runtime(tmp_path, env)
            try:
                with Client(runtime.address, token=tokens["alice"], timeout=20) as alice:
                    run_id = alice.start_run("refund", "refund A100").run_id
                    assert host.wait(30) == FAULT_EXIT_CODE  # the refund landed, then the host died
                    wait_for(lambda: alice.get_run(run_id).phase == run_pb2.RUN_PHASE_UNKNOWN_OUTCOME)
                    (started,) = [
                        e.tool_started
                        for e in alice.stream_events(run_id)
                        if e.HasField("tool_started") and e.tool_started.tool == "refund.issue"
                    ]
                with black_hole(port):
                    yield Stuck(db_url, runtime, run_id, tokens, started.idempotency_key)
            finally:
                runtime.close()
    finally:
        host.stop()


def test_diagnose_shows_the_owner_the_next_reconcile_time_and_the_calls_attempts(
    stuck: Stuck, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: dict[str, str] = {}

    def snapshot() -> bool:
        code, out, err = stuck.cli("ops", "diagnose", stuck.run_id, capsys=capsys)
        assert code == 0, err
        seen["owned" if f"owner={WORKER}" in out else "parked"] = out
        return {"owned", "parked"} <= set(seen)

    wait_for(snapshot, timeout_s=30)
    print("\n--- while the replica queries the ledger ---\n" + seen["owned"])
    print("--- while parked ---\n" + seen["parked"])
    for out in seen.values():
        assert f"run {stuck.run_id}  UNKNOWN_OUTCOME" in out
        assert "  waits for: UNKNOWN_OUTCOME call_2\n" in out
        call = next(line for line in out.splitlines() if line.startswith("    call_2  refund.issue"))
        assert "OUTCOME_UNKNOWN" in call and "attempts=1" in call  # sent once, never again
        assert f"operation={stuck.idempotency_key}" in call  # what GetOperation on the host takes
        assert "reconcile: call=call_2" in out and "attempts=" in out
        # Why it is unknown: the write's transport was cut (the host died before answering).
        assert "last error: tool.outcome.unknown" in out and "refund.issue call=call_2" in out
    owned = seen["owned"]
    assert "expires=" in owned and "generation=" in owned
    assert "query in progress" in owned
    parked = seen["parked"]
    assert "no replica holds it; wakes " in parked
    reconcile = next(line for line in parked.splitlines() if "reconcile:" in line)
    assert "next " in reconcile and ("(in " in reconcile or "ago)" in reconcile)  # ago: due, not yet taken


def test_diagnose_json_has_the_schedule_and_the_lease(
    stuck: Stuck, capsys: pytest.CaptureFixture[str]
) -> None:
    found: dict[str, dict[str, object]] = {}

    def snapshot() -> bool:
        code, out, err = stuck.cli("ops", "diagnose", stuck.run_id, "--json", capsys=capsys)
        assert code == 0, err
        data = json.loads(out)
        found["owned" if data.get("lease_owner") else "parked"] = data
        return {"owned", "parked"} <= set(found)

    wait_for(snapshot, timeout_s=30)
    owned, parked = found["owned"], found["parked"]
    assert owned["lease_owner"] == WORKER and "lease_expire_time" in owned
    assert int(str(parked["fencing_generation"])) >= 1
    reconcile = parked["reconcile"]
    assert isinstance(reconcile, dict)
    assert reconcile["call_id"] == "call_2" and "next_attempt_time" in reconcile
    assert int(reconcile["attempts"]) >= 1
    due = timestamp_pb2.Timestamp()
    due.FromJsonString(str(reconcile["next_attempt_time"]))
    assert due.ToNanoseconds() / 1e9 <= time.time() + CAP_S + 1  # within one backoff cap of now
    (call,) = parked["pending_calls"]  # type: ignore[misc]
    assert call["state"] == "PENDING_CALL_STATE_OUTCOME_UNKNOWN" and call["attempts"] == 1
    assert call["remote_operation_id"] == stuck.idempotency_key and "unknown_since" in call
    assert parked["waiting"] == {
        "reason": "WAIT_REASON_UNKNOWN_OUTCOME",
        "phase": "RUN_PHASE_UNKNOWN_OUTCOME",
        "detail": "call_2",
    }
    assert int(str(parked["max_faults"])) >= 1 and int(str(parked.get("fault_count", 0))) == 0


def test_the_admin_role_may_diagnose_too(stuck: Stuck) -> None:
    with stuck.client("boss") as boss:
        assert boss.get_run_diagnostics(stuck.run_id).run_id == stuck.run_id


@pytest.mark.parametrize("who", ["alice", "watcher"])
def test_a_caller_without_the_operator_role_is_permission_denied(
    stuck: Stuck, who: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with stuck.client(who) as client, pytest.raises(PermissionDeniedError) as refused:
        client.get_run_diagnostics(stuck.run_id)
    assert refused.value.reason == "MISSING_ROLE"
    assert refused.value.metadata["permission"] == "diagnose_runs"
    code, out, err = stuck.cli(who, "diagnose", stuck.run_id, capsys=capsys)
    assert code == 2 and out == ""
    assert "PERMISSION_DENIED" in err and "diagnose_runs" in err
    assert stuck.tokens[who] not in err


def test_another_tenants_run_is_not_found(stuck: Stuck, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = stuck.cli("globex-ops", "diagnose", stuck.run_id, capsys=capsys)
    assert code == 2 and out == ""
    assert err.startswith("error: NOT_FOUND") and "[reason=RUN_NOT_FOUND]" in err


def test_an_unknown_run_is_not_found(stuck: Stuck) -> None:
    with stuck.client("ops") as ops, pytest.raises(NotFoundError) as refused:
        ops.get_run_diagnostics("0" * 26)
    assert refused.value.reason == "RUN_NOT_FOUND"


@pytest.mark.parametrize("bad", ["", "x" * 2000, "run id", "run\x00id"])
def test_a_bad_run_id_is_invalid_argument(stuck: Stuck, bad: str) -> None:
    with stuck.client("ops") as ops, pytest.raises(InvalidArgumentError) as refused:
        ops.get_run_diagnostics(bad)
    bad_request = refused.value.detail(error_details_pb2.BadRequest)
    assert bad_request is not None and [v.field for v in bad_request.field_violations] == ["run_id"]


def test_diagnosing_changes_nothing(stuck: Stuck) -> None:
    with stuck.client("ops") as ops:
        before = ops.get_run(stuck.run_id)
        took = []
        for _ in range(20):
            began = time.perf_counter()
            ops.get_run_diagnostics(stuck.run_id)
            took.append(time.perf_counter() - began)
        after = ops.get_run(stuck.run_id)
    took.sort()
    print(
        f"\nGetRunDiagnostics of a {after.last_seq}-event run: "
        f"median {took[10] * 1000:.1f} ms, max {took[-1] * 1000:.1f} ms"
    )
    assert after.last_seq == before.last_seq  # no event, whatever the wait did meanwhile


def test_the_raw_rpc_answers_like_the_client(stuck: Stuck) -> None:
    request = runtime_service_pb2.GetRunDiagnosticsRequest(run_id=stuck.run_id)
    with grpc.insecure_channel(stuck.runtime.address) as channel:
        call = channel.unary_unary(
            "/agentrt.runtime.v1.AgentRuntimeService/GetRunDiagnostics",
            request_serializer=runtime_service_pb2.GetRunDiagnosticsRequest.SerializeToString,
            response_deserializer=runtime_service_pb2.GetRunDiagnosticsResponse.FromString,
        )
        with pytest.raises(grpc.RpcError) as refused:
            call(request, timeout=10)  # no credential
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        reply = call(request, timeout=10, metadata=[("authorization", f"Bearer {stuck.tokens['ops']}")])
    assert reply.diagnostics.run_id == stuck.run_id
    assert reply.diagnostics.phase == run_pb2.RUN_PHASE_UNKNOWN_OUTCOME


def test_a_database_that_drops_the_runtimes_connections_answers_ok_or_unavailable(stuck: Stuck) -> None:
    if not stuck.db_url.startswith("postgresql"):
        pytest.skip("connections are dropped on PostgreSQL only")
    database = stuck.db_url.split("?", 1)[0].rsplit("/", 1)[1]
    codes: list[str] = []
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin, stuck.client("ops") as ops:
        for _ in range(20):
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (database,),
            )
            try:
                ops.get_run_diagnostics(stuck.run_id)
                codes.append("OK")
            except RPCError as exc:
                codes.append(exc.code.name)
                if exc.code == grpc.StatusCode.UNAVAILABLE:
                    assert exc.reason == "UNAVAILABLE" and exc.detail(error_details_pb2.RetryInfo) is not None
                assert "postgres" not in exc.message.lower()  # nothing of the database leaks
    print(f"\nGetRunDiagnostics under dropped connections: {sorted(set(codes))} ({len(codes)} calls)")
    assert set(codes) <= {"OK", "UNAVAILABLE"}, codes
    with stuck.client("ops") as ops:  # and it recovers
        wait_for(lambda: ops.get_run_diagnostics(stuck.run_id).run_id == stuck.run_id)


async def test_the_async_client_answers_as_the_sync_one(stuck: Stuck) -> None:
    async with AsyncClient(stuck.runtime.address, token=stuck.tokens["ops"], timeout=20) as ops:
        found = await ops.get_run_diagnostics(stuck.run_id)
        assert found.run_id == stuck.run_id and found.reconcile.call_id == "call_2"
        with pytest.raises(NotFoundError):
            await ops.get_run_diagnostics("0" * 26)
    async with AsyncClient(stuck.runtime.address, token=stuck.tokens["alice"], timeout=20) as alice:
        with pytest.raises(PermissionDeniedError):
            await alice.get_run_diagnostics(stuck.run_id)


@pytest.mark.postgres
def test_a_run_whose_owner_was_killed_shows_the_dead_owner_and_its_lapsed_lease(
    tmp_path: Path, refund_host: ToolHostProcess, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    nap = {1: {"tool": "sleep.wait", "arguments": {"seconds": 30.0}}, 2: {"text": "rested"}}
    with serve_fake_openai(nap) as (_, model_url):
        env = runtime_env(db_url=pg_url, tool_host=refund_host.address, model_url=model_url)
        owner = start_runtime(tmp_path, {**env, "AGENTRT_WORKER_ID": json.dumps("replica-a")})
        standby: RuntimeProcess | None = None
        try:
            with Client(owner.address) as client:  # no [auth]: loopback callers have every role
                run_id = client.start_run("refund", "nap first").run_id

                def napping() -> bool:
                    found = client.get_run_diagnostics(run_id)
                    return found.lease_owner == "replica-a" and [c.attempts for c in found.pending_calls] == [
                        1
                    ]

                wait_for(napping)
            # A standby that polls rarely, started while the owner's lease is good: the dead
            # owner's lapsed lease stays visible for a while.
            standby = start_runtime(
                tmp_path,
                {**env, "AGENTRT_WORKER_ID": json.dumps("replica-b"), "AGENTRT_POLL_INTERVAL_S": "60"},
            )
            owner.kill()
            with Client(standby.address) as client:
                alive = client.get_run_diagnostics(run_id)
            assert alive.lease_owner == "replica-a"
            lapse = alive.lease_expire_time.ToMilliseconds() / 1000
            wait_for(lambda: time.time() > lapse + 0.2, timeout_s=10)
            code = cli.main(["--target", standby.address, "diagnose", run_id])
            out, err = capsys.readouterr()
            assert code == 0, err
            print("\n" + out)
            lease = next(line for line in out.splitlines() if line.startswith("  lease:"))
            assert "owner=replica-a" in lease and "LAPSED" in lease and "ago)" in lease
            assert "sleep.wait  step=" in out and "IN_FLIGHT  attempts=1" in out
        finally:
            owner.close()
            if standby is not None:
                standby.close()
