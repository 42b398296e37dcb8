"""The ``agentrt`` CLI (``agentrt.client.cli.main``) against an in-process fake runtime over real gRPC.

``main`` is synchronous, so each test runs it in a thread while the fake's grpc.aio
server keeps serving on the test's event loop.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from agentrt.client import cli
from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2, runtime_service_pb2_grpc

Ctx = grpc.aio.ServicerContext[Any, Any]
TOKEN = "cli-t0ken-value"


def events_of(run_id: str, phase: run_pb2.RunPhase | None) -> list[run_pb2.RunEvent]:
    events = [
        run_pb2.RunEvent(run_id=run_id, seq=1, run_started=run_pb2.RunStarted(agent_name="a", input="hi")),
        run_pb2.RunEvent(run_id=run_id, seq=0, model_text_delta=run_pb2.ModelTextDelta(step=1, text="Lo")),
        run_pb2.RunEvent(
            run_id=run_id,
            seq=2,
            model_completed=run_pb2.ModelCompleted(
                step=1,
                tool_calls=[run_pb2.ToolCall(tool="orders.lookup", arguments_json='{"order_id":"A100"}')],
            ),
        ),
        run_pb2.RunEvent(
            run_id=run_id, seq=3, tool_completed=run_pb2.ToolCompleted(tool="orders.lookup", result_json="{}")
        ),
    ]
    if phase is not None:
        events.append(
            run_pb2.RunEvent(run_id=run_id, seq=4, run_ended=run_pb2.RunEnded(phase=phase, reason="r"))
        )
    elif run_id == "run-pauses":  # RunAgent's stream-only last item when the run waits for a person
        waiting = run_pb2.RunWaiting(
            reason=run_pb2.WAIT_REASON_APPROVAL, phase=run_pb2.RUN_PHASE_WAITING_APPROVAL, detail="appr_1"
        )
        events.append(run_pb2.RunEvent(run_id=run_id, seq=0, run_waiting=waiting))
    return events


async def abort_rich(context: Ctx, code: grpc.StatusCode, message: str, *details: Any) -> None:
    packed = []
    for d in details:
        a = any_pb2.Any()
        a.Pack(d)
        packed.append(a)
    st = rpc_status.to_status(status_pb2.Status(code=code.value[0], message=message, details=packed))
    await context.abort(st.code, st.details, trailing_metadata=st.trailing_metadata)


class FakeRuntime(runtime_service_pb2_grpc.AgentRuntimeServiceServicer):
    """Agent "ok" completes, "fails" fails, "pauses" stops streaming while waiting for approval."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.time_remaining: list[float | None] = []
        self.metadata: list[dict[str, str]] = []

    def _record(self, request: Any, context: Ctx) -> None:
        self.requests.append(request)
        self.time_remaining.append(context.time_remaining())
        self.metadata.append({k: v for k, v in context.invocation_metadata() or () if isinstance(v, str)})

    async def RunAgent(
        self, request: runtime_service_pb2.RunAgentRequest, context: Ctx
    ) -> AsyncIterator[runtime_service_pb2.RunAgentResponse]:
        self._record(request, context)
        phase = {"ok": run_pb2.RUN_PHASE_COMPLETED, "fails": run_pb2.RUN_PHASE_FAILED}.get(request.agent_name)
        for e in events_of(f"run-{request.agent_name}", phase):
            yield runtime_service_pb2.RunAgentResponse(event=e)

    async def StartRun(self, request: runtime_service_pb2.StartRunRequest, context: Ctx) -> Any:
        self._record(request, context)
        if not request.input:
            await abort_rich(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                "bad request",
                error_details_pb2.ErrorInfo(reason="INPUT_EMPTY"),
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(
                            field="input", description="must not be empty"
                        )
                    ]
                ),
            )
        run = run_pb2.Run(run_id="run-new", agent_name=request.agent_name, input=request.input)
        run.phase = run_pb2.RUN_PHASE_QUEUED
        return runtime_service_pb2.StartRunResponse(run=run)

    async def GetRun(self, request: runtime_service_pb2.GetRunRequest, context: Ctx) -> Any:
        self._record(request, context)
        if request.run_id == "missing":
            await abort_rich(
                context,
                grpc.StatusCode.NOT_FOUND,
                "no run missing",
                error_details_pb2.ErrorInfo(reason="RUN_NOT_FOUND"),
            )
        if request.run_id == "anonymous":
            await abort_rich(
                context,
                grpc.StatusCode.UNAUTHENTICATED,
                "a credential is required",
                error_details_pb2.ErrorInfo(reason="CREDENTIAL_MISSING"),
            )
        if request.run_id == "forbidden":
            info = error_details_pb2.ErrorInfo(
                reason="MISSING_ROLE", metadata={"permission": "read_runs", "subject": "bob"}
            )
            await abort_rich(
                context, grpc.StatusCode.PERMISSION_DENIED, "bob lacks a role that may read runs", info
            )
        phase = (
            run_pb2.RUN_PHASE_WAITING_APPROVAL
            if request.run_id == "run-pauses"
            else run_pb2.RUN_PHASE_COMPLETED
        )
        return runtime_service_pb2.GetRunResponse(
            run=run_pb2.Run(run_id=request.run_id, agent_name="ok", phase=phase, output="done", revision=3)
        )

    async def ListRuns(self, request: runtime_service_pb2.ListRunsRequest, context: Ctx) -> Any:
        self._record(request, context)
        runs = [
            run_pb2.Run(run_id=f"run-{i}", agent_name="ok", phase=run_pb2.RUN_PHASE_COMPLETED)
            for i in range(2)
        ]
        return runtime_service_pb2.ListRunsResponse(runs=runs, next_page_token="tok-2")

    async def StreamRunEvents(
        self, request: runtime_service_pb2.StreamRunEventsRequest, context: Ctx
    ) -> AsyncIterator[runtime_service_pb2.StreamRunEventsResponse]:
        self._record(request, context)
        for e in events_of(request.run_id, run_pb2.RUN_PHASE_COMPLETED):
            if e.seq > request.after_seq:
                yield runtime_service_pb2.StreamRunEventsResponse(event=e)

    async def CancelRun(self, request: runtime_service_pb2.CancelRunRequest, context: Ctx) -> Any:
        self._record(request, context)
        if request.run_id == "ended":
            await abort_rich(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                "run already ended",
                error_details_pb2.ErrorInfo(reason="RUN_ENDED"),
                error_details_pb2.PreconditionFailure(
                    violations=[
                        error_details_pb2.PreconditionFailure.Violation(
                            type="PHASE", subject="ended", description="run is COMPLETED"
                        )
                    ]
                ),
                error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=3)),
            )
        run = run_pb2.Run(
            run_id=request.run_id, phase=run_pb2.RUN_PHASE_CANCEL_REQUESTED, reason=request.reason
        )
        return runtime_service_pb2.CancelRunResponse(run=run)

    async def ResolveApproval(self, request: runtime_service_pb2.ResolveApprovalRequest, context: Ctx) -> Any:
        self._record(request, context)
        if request.expected_revision != 3:
            await abort_rich(
                context,
                grpc.StatusCode.ABORTED,
                "run moved on",
                error_details_pb2.ErrorInfo(reason="STALE_REVISION"),
            )
        run = run_pb2.Run(run_id=request.run_id, phase=run_pb2.RUN_PHASE_TOOL_STEP, revision=4)
        return runtime_service_pb2.ResolveApprovalResponse(run=run)


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeRuntime, str]]:
    servicer = FakeRuntime()
    server = grpc.aio.server()
    runtime_service_pb2_grpc.add_AgentRuntimeServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        await server.stop(grace=None)


async def agentrt(*argv: str) -> int:
    return await asyncio.to_thread(cli.main, list(argv))


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


async def test_run_starts_and_prints_the_run(
    fake: tuple[FakeRuntime, str], capsys: pytest.CaptureFixture[str]
) -> None:
    servicer, target = fake
    argv = [
        "run",
        "ok",
        "hello",
        "--request-key",
        "k1",
        "--session",
        "s1",
        "--budget-steps",
        "3",
        "--timeout-s",
        "1.5",
    ]
    assert await agentrt("--target", target, *argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("run run-new  QUEUED  agent=ok") and "input:  hello" in out
    req = servicer.requests[0]
    assert isinstance(req, runtime_service_pb2.StartRunRequest)
    assert (req.agent_name, req.input, req.request_key, req.session_id) == ("ok", "hello", "k1", "s1")
    assert req.budgets.max_model_steps == 3 and req.budgets.timeout.ToMilliseconds() == 1500


async def test_run_json(fake: tuple[FakeRuntime, str], capsys: pytest.CaptureFixture[str]) -> None:
    servicer, target = fake
    assert await agentrt("--target", target, "--json", "run", "ok", "hello") == 0
    [run] = json_lines(capsys.readouterr().out)
    assert run["run_id"] == "run-new" and run["phase"] == "RUN_PHASE_QUEUED"
    assert not servicer.requests[0].HasField("budgets")


@pytest.mark.parametrize(("agent", "code"), [("ok", 0), ("fails", 1)])
async def test_run_follow_exit_code_follows_terminal_phase(
    fake: tuple[FakeRuntime, str], capsys: pytest.CaptureFixture[str], agent: str, code: int
) -> None:
    _, target = fake
    assert await agentrt("--target", target, "run", agent, "hi", "--follow") == code
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("#1  run.started")
    assert lines[1] == '~  model.text.delta  step=1 "Lo"'
    assert lines[2] == "#2  model.completed  step=1 tool_calls=orders.lookup(order_id=A100)"
    assert lines[-1].startswith("#4  run.ended  " + ("COMPLETED" if code == 0 else "FAILED"))


async def test_run_follow_stream_ending_at_a_wait_says_what_the_run_waits_for_and_exits_1(
    fake: tuple[FakeRuntime, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, target = fake
    assert await agentrt("--target", target, "run", "pauses", "hi", "--follow") == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines()[-1] == '~  run.waiting  APPROVAL phase=WAITING_APPROVAL detail="appr_1"'
    assert captured.err.strip() == (
        "run run-pauses waits: APPROVAL appr_1; approve or reject it (agentrt approvals); "
        "then: agentrt events run-pauses --after 3 --follow"
    )


async def test_run_follow_stream_ending_without_an_end_or_a_wait_says_how_to_follow(
    fake: tuple[FakeRuntime, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, target = fake  # an older server: the stream just stops where the run paused
    assert await agentrt("--target", target, "run", "older", "hi", "--follow") == 1
    assert capsys.readouterr().err.strip() == (
        "run run-older has not ended; follow it with: agentrt events run-older --after 3 --follow"
    )


async def test_run_follow_json_lines(
    fake: tuple[FakeRuntime, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, target = fake
    assert await agentrt("--target", target, "--json", "run", "ok", "hi", "--follow") == 0
    events = json_lines(capsys.readouterr().out)
    assert [e.get("seq", "0") for e in events] == ["1", "0", "2", "3", "4"]
    assert events[-1]["run_ended"]["phase"] == "RUN_PHASE_COMPLETED"


async def test_events_after(fake: tuple[FakeRuntime, str], capsys: pytest.CaptureFixture[str]) -> None:
    servicer, target = fake
    assert await agentrt("--target", target, "events", "run-7", "--after", "2", "--follow") == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["#3", "#4"]
    req = servicer.requests[0]
    assert req.run_id == "run-7" and req.after_seq == 2 and req.follow


async def test_get_text_json_and_options_after_the_command(
    fake: tuple[FakeRuntime, str], capsys: pytest.CaptureFixture[str]
) -> None:
    servicer, target = fake
    assert await agentrt("--target", target, "--timeout", "3", "get", "run-7") == 0
    assert capsys.readouterr().out.splitlines()[0] == "run run-7  COMPLETED  agent=ok  revision=3"
    remaining = servicer.time_remaining[0]
    assert remaining is not None and 1.0 < remaining < 3.5
    assert await agentrt("get", "run-7", "--target", target, "--json") == 0
    [run] = json_lines(capsys.readouterr().out)
    assert run["output"] == "done"


async def test_target_from_environment(
    fake: tuple[FakeRuntime, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, target = fake
    monkeypatch.setenv("AGENTRT_TARGET", target)
    assert await agentrt("get", "run-7") == 0
    assert "run run-7" in capsys.readouterr().out


async def test_list(fake: tuple[FakeRuntime, str], capsys: pytest.CaptureFixture[str]) -> None:
    servicer, target = fake
    argv = ["list", "--phase", "completed", "--phase", "RUN_PHASE_FAILED", "--agent", "ok", "--limit", "2"]
    assert await agentrt("--target", target, *argv) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["run-0  COMPLETED  ok  -", "run-1  COMPLETED  ok  -"]
    assert "more: --page-token tok-2" in captured.err
    req = servicer.requests[0]
    assert list(req.phases) == [run_pb2.RUN_PHASE_COMPLETED, run_pb2.RUN_PHASE_FAILED]
    assert (req.agent_name, req.page_size) == ("ok", 2)
    assert await agentrt("--target", target, "--json", "list", "--page-token", "tok-2") == 0
    assert [r["run_id"] for r in json_lines(capsys.readouterr().out)] == ["run-0", "run-1"]
    assert servicer.requests[1].page_token == "tok-2" and servicer.requests[1].page_size == 50


async def test_list_unknown_phase_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert await agentrt("list", "--phase", "bogus") == 2
    assert "unknown phase 'bogus'" in capsys.readouterr().err


async def test_cancel(fake: tuple[FakeRuntime, str], capsys: pytest.CaptureFixture[str]) -> None:
    _, target = fake
    assert await agentrt("--target", target, "cancel", "run-7", "--reason", "user asked") == 0
    out = capsys.readouterr().out
    assert "CANCEL_REQUESTED" in out and "reason: user asked" in out


async def test_approve_and_reject(fake: tuple[FakeRuntime, str], capsys: pytest.CaptureFixture[str]) -> None:
    servicer, target = fake
    assert (
        await agentrt("--target", target, "approve", "run-7", "ap-1", "--args-hash", "h", "--revision", "3")
        == 0
    )
    assert "TOOL_STEP" in capsys.readouterr().out
    argv = ["reject", "run-7", "ap-1", "--args-hash", "h", "--revision", "3", "--comment", "no"]
    assert await agentrt("--target", target, *argv) == 0
    approve, reject = servicer.requests
    assert approve.decision == run_pb2.APPROVAL_DECISION_APPROVE and approve.args_hash == "h"
    assert reject.decision == run_pb2.APPROVAL_DECISION_REJECT and reject.comment == "no"


async def test_rpc_errors_print_code_message_reason_and_details(
    fake: tuple[FakeRuntime, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, target = fake
    assert await agentrt("--target", target, "get", "missing") == 2
    assert capsys.readouterr().err == "error: NOT_FOUND no run missing [reason=RUN_NOT_FOUND]\n"

    assert await agentrt("--target", target, "run", "ok", "") == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: INVALID_ARGUMENT bad request [reason=INPUT_EMPTY]",
        "  field input: must not be empty",
    ]

    assert await agentrt("--target", target, "cancel", "ended") == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: FAILED_PRECONDITION run already ended [reason=RUN_ENDED]",
        "  precondition PHASE ended: run is COMPLETED",
        "  retry after 3s",
    ]

    argv = ["approve", "run-7", "ap-1", "--args-hash", "h", "--revision", "1"]
    assert await agentrt("--target", target, "--json", *argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "error: ABORTED run moved on [reason=STALE_REVISION]\n"


async def test_auth_errors_say_code_reason_and_what_to_check(
    fake: tuple[FakeRuntime, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, target = fake
    assert await agentrt("--target", target, "get", "anonymous") == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: UNAUTHENTICATED a credential is required [reason=CREDENTIAL_MISSING]",
        "hint: no credential was sent: give a token (token_file, --token-file or AGENTRT_TOKEN_FILE) "
        "or a client certificate (cert_file and key_file, --cert and --key)",
    ]
    assert await agentrt("--target", target, "get", "forbidden", "--token", TOKEN) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "error: PERMISSION_DENIED bob lacks a role that may read runs [reason=MISSING_ROLE]",
        "  permission: read_runs",
        "  subject: bob",
    ]
    assert await agentrt("--target", target, "get", "anonymous", "--token", TOKEN) == 2
    err += capsys.readouterr().err
    assert "hint" not in err and TOKEN not in err


async def test_token_is_sent_as_bearer_to_a_loopback_target(
    fake: tuple[FakeRuntime, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    servicer, target = fake
    assert await agentrt("--target", target, "--token", TOKEN, "get", "run-7") == 0
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    assert await agentrt("get", "run-7", "--target", target, "--token-file", str(token_file)) == 0
    monkeypatch.setenv("AGENTRT_TOKEN", "from-env")
    assert await agentrt("--target", target, "list") == 0
    assert await agentrt("--target", target, "run", "ok", "hi", "--follow") == 0
    capsys.readouterr()
    assert [m.get("authorization") for m in servicer.metadata] == [
        f"Bearer {TOKEN}",
        "Bearer from-file",
        "Bearer from-env",
        "Bearer from-env",
    ]


async def test_unusable_credentials_are_refused_before_any_call(
    fake: tuple[FakeRuntime, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    servicer, _ = fake
    monkeypatch.setenv("AGENTRT_TOKEN", TOKEN)
    assert await agentrt("--target", "10.255.255.1:50051", "get", "run-7") == 2
    err = capsys.readouterr().err
    assert err == (
        "error: refusing to send a token in clear to 10.255.255.1:50051: use TLS (--ca / AGENTRT_CA), "
        "or connect to a loopback address\n"
    )
    assert await agentrt("--target", "127.0.0.1:1", "--ca", "/nonexistent/ca.pem", "list") == 2
    assert (
        capsys.readouterr().err
        == "error: cannot read CA file /nonexistent/ca.pem: No such file or directory\n"
    )
    assert await agentrt("--target", "127.0.0.1:1", "--cert", "c.pem", "list") == 2
    assert "needs its key too" in capsys.readouterr().err
    assert servicer.requests == []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("argv", [["get", "r"], ["run", "a", "b", "--follow"], ["events", "r"]])
async def test_unreachable_target_exits_2_with_hint(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    target = f"127.0.0.1:{free_port()}"
    assert await agentrt("--target", target, *argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: UNAVAILABLE ")
    assert f"hint: is `agentrt serve` running at {target}?" in err


async def test_usage_errors_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert await agentrt() == 2
    assert await agentrt("run", "only-agent") == 2
    assert await agentrt("--timeout", "0", "get", "r") == 2
    assert await agentrt("approve", "r", "ap") == 2  # --args-hash and --revision are required
    capsys.readouterr()
    assert await agentrt("--help") == 0
    assert "demo" in capsys.readouterr().out


def test_arguments_after_serve_and_toolhost_pass_through_verbatim() -> None:
    split = cli._split_delegated
    assert split(["--target", "x:1", "serve", "--config", "c.toml", "--demo"]) == (
        ["--target", "x:1", "serve"],
        ["--config", "c.toml", "--demo"],
    )
    assert split(["--json", "toolhost", "--plugin", "m", "-h"]) == (
        ["--json", "toolhost"],
        ["--plugin", "m", "-h"],
    )
    assert split(["--ca", "serve", "--tls", "--token-file", "t", "serve", "--demo"]) == (
        ["--ca", "serve", "--tls", "--token-file", "t", "serve"],
        ["--demo"],
    )
    assert split(["get", "serve"]) == (["get", "serve"], [])
    assert split(["run", "a", "b"]) == (["run", "a", "b"], [])
