"""A secured runtime and tool host, as real processes, and the checks made after every fuzz call.

One runtime (TLS, bearer tokens for a fuzz tenant and a bystander tenant, signed call grants)
talks mTLS to one tool host. :meth:`FuzzStack.run_example` settles the fuzz tenant's runs,
snapshots what is stored, sends one request, and checks:

1. no status is INTERNAL or UNKNOWN (nor is any status of the checks below);
2. health is SERVING on both processes;
3. a rejected call wrote nothing: the fuzz tenant's runs (ids, phases, revisions, last seqs,
   payload rows) and the tool host's ledger (operations and fencing rows) are unchanged;
4. the bystander tenant's ListRuns and GetRun still work; so do the fuzz tenant's own ListRuns
   and GetRun of any run the call created (what was stored reads back).

Also a finding: an error whose trailers outgrow the client's header limit (it echoed input).

Used by tests/fuzz (CI-sized) and bench/fuzz_rpcs.py (longer).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentrt.proto.runtime.v1 import runtime_service_pb2 as rt
from agentrt.proto.runtime.v1 import runtime_service_pb2_grpc as rt_grpc
from agentrt.proto.toolhost.v1 import tool_host_service_pb2_grpc as th_grpc
from agentrt.testing import RuntimeProcess, ToolHostProcess, spawn_runtime, spawn_tool_host
from agentrt.toolhost.security import DevPki, GrantSigner, generate_dev_pki, public_key_pem, write_signing_key
from tests.fuzz.findings import (
    BROKEN,
    Finding,
    Outcome,
    Snapshot,
    Tally,
    clip,
    describe,
    differences,
    log_lines,
)
from tests.fuzz.strategies import HostCall, Targets
from tests.security.conftest import host_args, runtime_config

FUZZ_TENANT = "fuzzco"
BYSTANDER_TENANT = "bystander"
ALL_ROLES = ["runner", "approver", "operator"]
TOKENS = {"fuzz": (FUZZ_TENANT, ALL_ROLES), "bystander": (BYSTANDER_TENANT, ALL_ROLES)}

TERMINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "EXPIRED"})
RUNTIME_RPCS = (
    "RunAgent",
    "StartRun",
    "GetRun",
    "ListRuns",
    "StreamRunEvents",
    "CancelRun",
    "ResolveApproval",
    "ResolveOutcome",
    "GetPayload",
    "GetRunDiagnostics",
)
STREAMING = frozenset({"RunAgent", "StreamRunEvents", "GetPayload"})
HOST_RPCS = ("ListTools", "InvokeTool", "GetOperation", "PreviewTool", "CancelOperation")
UNARY_TIMEOUT_S = 5.0
STREAM_TIMEOUT_S = 1.0  # a follow stream of a live run legitimately runs until the deadline
MAX_ITEMS = 5
SETTLE_TIMEOUT_S = 20.0
TRAILERS_TOO_LARGE = "received metadata size exceeds"
OK = grpc.StatusCode.OK
TARGET_MARGIN_MS = 15_000  # the approval target (60 s deadline) is renewed this long before it


def write_tokens(path: Path) -> dict[str, str]:
    tokens = {name: f"tok-{name}-{uuid.uuid4().hex}" for name in TOKENS}
    text = ""
    for name, (tenant, roles) in TOKENS.items():
        digest = hashlib.sha256(tokens[name].encode()).hexdigest()
        text += f'[[tokens]]\nsha256 = "{digest}"\nsubject = "{name}"\ntenant = "{tenant}"\n'
        text += f"roles = {json.dumps(roles)}\n"
    path.write_text(text)
    return tokens


class FuzzStack:
    """The running processes, clients to them, and the checks of every example."""

    def __init__(
        self,
        *,
        runtime: RuntimeProcess,
        host: ToolHostProcess,
        api_pki: DevPki,
        host_pki: DevPki,
        grant_key: Path,
        tokens: dict[str, str],
        db_path: Path,
    ) -> None:
        self.runtime = runtime
        self.host = host
        self.tokens = tokens
        self.db_path = db_path
        self.signer = GrantSigner(key_file=grant_key)
        api_creds = grpc.ssl_channel_credentials(root_certificates=api_pki.ca_file.read_bytes())
        self.runtime_channel = grpc.secure_channel(runtime.address, api_creds)
        cert, key = host_pki.client_files["agentrt-runtime"]
        host_creds = grpc.ssl_channel_credentials(
            root_certificates=host_pki.ca_file.read_bytes(),
            private_key=key.read_bytes(),
            certificate_chain=cert.read_bytes(),
        )
        self.host_channel = grpc.secure_channel(host.address, host_creds)
        self.rt = rt_grpc.AgentRuntimeServiceStub(self.runtime_channel)
        self.th = th_grpc.ToolHostServiceStub(self.host_channel)
        self.targets = Targets()
        self.tally = Tally()
        self.last: Outcome | None = None

    def close(self) -> None:
        self.runtime_channel.close()
        self.host_channel.close()

    def metadata(self, who: str | None) -> tuple[tuple[str, str], ...]:
        return () if who is None else (("authorization", f"Bearer {self.tokens[who]}"),)

    # --- calls ---------------------------------------------------------------------------

    def call_runtime(self, rpc: str, request: Any, *, who: str | None = "fuzz") -> Outcome:
        method: Callable[..., Any] = getattr(self.rt, rpc)
        md = self.metadata(who)
        items = 0
        try:
            if rpc in STREAMING:
                stream = method(request, metadata=md, timeout=STREAM_TIMEOUT_S)
                for _ in stream:
                    items += 1
                    if items >= MAX_ITEMS:
                        cast(Any, stream).cancel()
                        break
            else:
                method(request, metadata=md, timeout=UNARY_TIMEOUT_S)
        except grpc.RpcError as exc:
            return Outcome(rpc, exc.code(), clip(exc.details() or "", 400), items)
        return Outcome(rpc, grpc.StatusCode.OK, "", items)

    def call_raw(self, rpc: str, data: bytes, *, who: str | None = "fuzz") -> Outcome:
        """Send ``data`` as the serialized request of ``rpc``, bypassing protobuf on this side."""
        host = rpc in HOST_RPCS
        service = "agentrt.toolhost.v1.ToolHostService" if host else "agentrt.runtime.v1.AgentRuntimeService"
        channel = self.host_channel if host else self.runtime_channel
        path = f"/{service}/{rpc}"
        md = () if host else self.metadata(who)
        items = 0
        try:
            if rpc in STREAMING:
                stream = channel.unary_stream(path, None, None)(data, metadata=md, timeout=STREAM_TIMEOUT_S)
                for _ in stream:
                    items += 1
                    if items >= MAX_ITEMS:
                        cast(Any, stream).cancel()
                        break
            else:
                channel.unary_unary(path, None, None)(data, metadata=md, timeout=UNARY_TIMEOUT_S)
        except grpc.RpcError as exc:
            return Outcome(rpc, exc.code(), clip(exc.details() or "", 400), items)
        return Outcome(rpc, grpc.StatusCode.OK, "", items)

    def host_metadata(self, call: HostCall) -> tuple[tuple[str, str], ...]:
        """The call headers, with a grant signed for exactly them when ``call.signed``."""
        # gRPC refuses header values that are not printable ASCII before sending anything (the
        # client's own error), so such a value is sent hex-encoded; the grant binds what is sent.
        run_id, call_id, key, attempt, fencing = (
            v if v.isprintable() and v.isascii() else v.encode().hex()
            for v in (call.run_id, call.call_id, call.idempotency_key, call.attempt, call.fencing)
        )
        md = [
            ("x-agentrt-idempotency-key", key),
            ("x-agentrt-run-id", run_id),
            ("x-agentrt-call-id", call_id),
            ("x-agentrt-attempt", attempt),
            ("x-agentrt-fencing-token", fencing),
        ]
        if call.signed:
            try:
                token = int(fencing)
            except ValueError:
                token = 1
            md.append(
                (
                    "x-agentrt-call-grant",
                    self.signer.sign(
                        tenant=FUZZ_TENANT,
                        run_id=run_id,
                        call_id=call_id,
                        idempotency_key=key,
                        fencing_token=token,
                        tool=getattr(call.request, "tool", ""),
                        arguments_json=getattr(call.request, "arguments_json", ""),
                    ),
                )
            )
        return tuple(md)

    def call_host(self, rpc: str, call: HostCall) -> Outcome:
        method: Callable[..., Any] = getattr(self.th, rpc)
        try:
            method(call.request, metadata=self.host_metadata(call), timeout=UNARY_TIMEOUT_S)
        except grpc.RpcError as exc:
            return Outcome(rpc, exc.code(), clip(exc.details() or "", 400), 0)
        return Outcome(rpc, grpc.StatusCode.OK, "", 0)

    # --- state ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _db(self, path: Path) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
        try:
            yield db
        finally:
            db.close()

    def fuzz_runs(self) -> list[tuple[str, str, int, int]]:
        with self._db(self.db_path) as db:
            rows = db.execute(
                "SELECT run_id, phase, revision, last_seq FROM runs WHERE tenant_id = ? ORDER BY created_ms",
                (FUZZ_TENANT,),
            ).fetchall()
        return [(str(r[0]), str(r[1]), int(r[2]), int(r[3])) for r in rows]

    def snapshot(self) -> Snapshot:
        runs = tuple(self.fuzz_runs())
        with self._db(self.db_path) as db:
            payloads = int(
                db.execute(
                    "SELECT COUNT(*) FROM run_payloads WHERE tenant_id = ?", (FUZZ_TENANT,)
                ).fetchone()[0]
            )
            others = tuple(
                db.execute(
                    "SELECT run_id, phase, revision, last_seq FROM runs WHERE tenant_id != ? ORDER BY run_id",
                    (FUZZ_TENANT,),
                ).fetchall()
            )
        ledger = self.host.data_dir / "ledger.sqlite"
        operations: tuple[tuple[Any, ...], ...] = ()
        fences: tuple[tuple[Any, ...], ...] = ()
        if ledger.exists():
            with self._db(ledger) as db:
                operations = tuple(
                    db.execute(
                        "SELECT tenant, idempotency_key, status, executions, update_time_ns FROM operations"
                        " ORDER BY tenant, idempotency_key"
                    ).fetchall()
                )
                fences = tuple(
                    db.execute("SELECT tenant, run_id, token FROM fencing ORDER BY 1, 2").fetchall()
                )
        return Snapshot(runs=runs, payloads=payloads, operations=operations, fences=fences, others=others)

    def _running_operations(self) -> int:
        ledger = self.host.data_dir / "ledger.sqlite"
        if not ledger.exists():
            return 0
        with self._db(ledger) as db:
            return int(db.execute("SELECT COUNT(*) FROM operations WHERE status = 'RUNNING'").fetchone()[0])

    def settle(self) -> list[str]:
        """Bring the fuzz tenant to rest: every run ended but the one approval target.

        Runs an accepted example started are cancelled rather than awaited. Returns problems
        (a run that would not end), so the caller reports them as findings.
        """
        cancelled: set[str] = set()
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while True:
            runs = self.fuzz_runs()
            self.targets.fuzz_runs = [r[0] for r in runs]
            target = self.targets.approval_run
            moving = [
                r
                for r in runs
                if r[1] not in TERMINAL and not (r[0] == target and r[1] == "WAITING_APPROVAL")
            ]
            if not moving and not self._running_operations():
                break
            for run_id, *_ in moving:
                if run_id not in cancelled:
                    cancelled.add(run_id)
                    self.call_runtime("CancelRun", rt.CancelRunRequest(run_id=run_id, reason="fuzz settle"))
            if time.monotonic() > deadline:
                return [
                    f"fuzz run {r[0]} did not end within {SETTLE_TIMEOUT_S:.0f}s of CancelRun (phase {r[1]})"
                    for r in moving
                ]
            time.sleep(0.05)
        if not any(r[0] == self.targets.approval_run and r[1] == "WAITING_APPROVAL" for r in runs):
            self._new_approval_target()
        elif self._expires_soon(self.targets.approval_run):
            # Its deadline must not pass between the snapshots of an example: replace it first.
            self.call_runtime(
                "CancelRun", rt.CancelRunRequest(run_id=self.targets.approval_run, reason="renew")
            )
            return self.settle()
        return []

    def _phase(self, run_id: str) -> str:
        with self._db(self.db_path) as db:
            row = db.execute("SELECT phase FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return "" if row is None else str(row[0])

    def _expires_soon(self, run_id: str) -> bool:
        with self._db(self.db_path) as db:
            row = db.execute("SELECT deadline_ms FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return row is None or int(row[0]) < time.time() * 1000 + TARGET_MARGIN_MS

    def _new_approval_target(self) -> None:
        """A refunder run of the fuzz tenant waiting for approval: ResolveApproval has a real target."""
        md = self.metadata("fuzz")
        stream = self.rt.RunAgent(
            rt.RunAgentRequest(agent_name="refunder", input="refund A100"), metadata=md, timeout=30
        )
        for response in stream:
            event = response.event
            self.targets.approval_run = event.run_id
            if event.HasField("approval_requested"):
                self.targets.approval_id = event.approval_requested.approval_id
                self.targets.args_hash = event.approval_requested.args_hash
                cast(Any, stream).cancel()
                return
        raise AssertionError("the refunder run did not ask for approval")

    def prepare(self) -> None:
        """Make the bystander's run and a page token, then settle."""
        md = self.metadata("bystander")
        for response in self.rt.RunAgent(
            rt.RunAgentRequest(agent_name="echo-only", input="hi"), metadata=md, timeout=30
        ):
            self.targets.bystander_run = response.event.run_id
        assert self.targets.bystander_run
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while self._phase(self.targets.bystander_run) not in TERMINAL:  # its run must be at rest
            assert time.monotonic() < deadline, "the bystander's run did not end"
            time.sleep(0.05)
        problems = self.settle()
        assert not problems, problems
        self.rt.StartRun(
            rt.StartRunRequest(agent_name="echo-only", input="second"),
            metadata=self.metadata("fuzz"),
            timeout=10,
        )
        problems = self.settle()
        assert not problems, problems
        page = self.rt.ListRuns(rt.ListRunsRequest(page_size=1), metadata=self.metadata("fuzz"), timeout=10)
        self.targets.page_token = page.next_page_token

    # --- invariants ----------------------------------------------------------------------

    def _serving(self, channel: grpc.Channel, name: str) -> str | None:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=5
            )
        except grpc.RpcError as exc:
            return f"{name} health check failed: {exc.code().name}"
        if reply.status != health_pb2.HealthCheckResponse.SERVING:
            return f"{name} health is {health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)}"
        return None

    def _names_bystander_run(self, request: Any) -> bool:
        return getattr(request, "run_id", None) == self.targets.bystander_run

    def check(self, outcome: Outcome, before: Snapshot, request: Any = None) -> list[str]:
        problems: list[str] = []
        if outcome.code in BROKEN:
            problems.append(f"{outcome.rpc} answered {outcome.code.name}: {outcome.message}")
        if TRAILERS_TOO_LARGE in outcome.message and "grpc-message" in outcome.message:
            # The client dropped the server's answer: its error trailers echoed unbounded input.
            problems.append(f"{outcome.rpc}'s error trailers exceeded the header limit: {outcome.message}")
        problems += filter(
            None,
            (self._serving(self.runtime_channel, "runtime"), self._serving(self.host_channel, "tool host")),
        )
        after = self.snapshot()
        if outcome.rejected and after != before:
            problems += differences(before, after, outcome)
        if after.others != before.others:
            problems.append(f"{outcome.rpc} ({outcome.code.name}) changed another tenant's runs")
        if outcome.code == OK and self.targets.bystander_run and self._names_bystander_run(request):
            problems.append(f"{outcome.rpc} answered OK for another tenant's run")
        bystander = [
            self.call_runtime("ListRuns", rt.ListRunsRequest(page_size=10), who="bystander"),
            self.call_runtime("GetRun", rt.GetRunRequest(run_id=self.targets.bystander_run), who="bystander"),
        ]
        problems += [
            f"bystander {o.rpc} answered {o.code.name}: {o.message}"
            for o in bystander
            if o.code != grpc.StatusCode.OK
        ]
        known = {r[0] for r in before.runs}
        own = [self.call_runtime("ListRuns", rt.ListRunsRequest(page_size=20))]
        own += [
            self.call_runtime("GetRun", rt.GetRunRequest(run_id=r[0]))
            for r in after.runs
            if r[0] not in known
        ]
        # What was stored must read back: a run its owner cannot list or fetch is lost to them.
        problems += [
            f"fuzz tenant's own {o.rpc} answered {o.code.name}: {o.message}" for o in own if o.code != OK
        ]
        return problems

    def run_example(self, rpc: str, request: Any, *, send: Callable[[], Outcome] | None = None) -> list[str]:
        """Settle, send one request, check the invariants; records and returns the problems.

        ``send`` replaces the ordinary call (e.g. raw bytes); ``request`` is then only reported.
        """
        problems = self.settle()
        before = self.snapshot()
        runtime_log, host_log = len(self.runtime.stderr_text()), len(self.host.stderr_text())
        if send is not None:
            outcome = send()
        elif rpc in HOST_RPCS:
            outcome = self.call_host(rpc, request)
        else:
            outcome = self.call_runtime(rpc, request)
        self.last = outcome
        problems += self.check(outcome, before, request)
        self.tally.examples[rpc] += 1
        self.tally.codes[outcome.code.name] += 1
        self.tally.by_rpc[rpc, outcome.code.name] += 1
        if problems:
            log = self.runtime.stderr_text()[runtime_log:] + self.host.stderr_text()[host_log:]
            self.tally.findings.append(
                Finding(
                    rpc=rpc,
                    code=outcome.code.name,
                    problems=problems,
                    request=describe(request),
                    server_log=log_lines(log),
                )
            )
        return problems


@contextlib.contextmanager
def fuzz_stack(root: Path) -> Iterator[FuzzStack]:
    """Start the tool host and the secured runtime (SQLite) under ``root``; yields a prepared stack."""
    api_pki = generate_dev_pki(root / "api-pki")
    host_pki = generate_dev_pki(root / "host-pki", clients=["agentrt-runtime"])
    grant_key, grant_public = root / "grant.key", root / "grant.pub"
    grant_public.write_bytes(public_key_pem(write_signing_key(grant_key)))
    tokens = write_tokens(root / "tokens.toml")
    db_path = root / "agentrt.sqlite"
    with spawn_tool_host(
        root / "toolhost",
        plugins=["agentrt.plugins.demo_tools"],
        extra_args=host_args(host_pki, grant_public),
    ) as host:
        config = runtime_config(
            root / "agentrt.toml",
            db_url=f"sqlite:///{db_path}",
            host=host,
            api_pki=api_pki,
            host_pki=host_pki,
            tokens_file=root / "tokens.toml",
            grant_key=grant_key,
        )
        with spawn_runtime(["--config", str(config)], cwd=root) as runtime:
            stack = FuzzStack(
                runtime=runtime,
                host=host,
                api_pki=api_pki,
                host_pki=host_pki,
                grant_key=grant_key,
                tokens=tokens,
                db_path=db_path,
            )
            try:
                stack.prepare()
                yield stack
            finally:
                stack.close()
