"""A careless or hostile client against a real runtime process (issue 9, edge validation and keys).

Each test reproduces a bullet of the issue's "Why": the request is refused with INVALID_ARGUMENT
(BadRequest naming the field) or the documented status, nothing is written, trailers stay small,
and every caller's GetRun and ListRuns keep working afterwards.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status

from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2, runtime_service_pb2_grpc
from agentrt.server.api._validate import MAX_COST_MICROS
from agentrt.testing import RuntimeProcess, spawn_runtime
from tests.e2e.conftest import agent_toml, toml_value

TENANTS = {"alice": ("acme", ["runner", "approver", "operator"]), "carol": ("globex", ["runner", "operator"])}
DONE = [{"text": "done"}]


@dataclass
class Refusal:
    code: grpc.StatusCode
    reason: str
    fields: list[str]
    trailer_bytes: int


@dataclass
class Stack:
    runtime: RuntimeProcess
    channel: grpc.Channel
    tokens: dict[str, str]

    def stub(self) -> runtime_service_pb2_grpc.AgentRuntimeServiceStub:
        return runtime_service_pb2_grpc.AgentRuntimeServiceStub(self.channel)

    def auth(self, who: str = "alice") -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {self.tokens[who]}")]

    def call(self, method: str, request: Any, who: str = "alice") -> Any:
        rpc = getattr(self.stub(), method)
        reply = rpc(request, metadata=self.auth(who), timeout=30)
        return list(reply) if method in {"RunAgent", "StreamRunEvents", "GetPayload"} else reply

    def refused(self, method: str, request: Any, who: str = "alice") -> Refusal:
        with pytest.raises(grpc.RpcError) as caught:
            self.call(method, request, who)
        return refusal(caught.value)

    def run_ids(self, who: str = "alice") -> list[str]:
        reply = self.call("ListRuns", runtime_service_pb2.ListRunsRequest(page_size=500), who)
        return [r.run_id for r in reply.runs]

    def assert_healthy(self) -> None:
        """Every tenant can still read each of its runs, one by one and listed."""
        for who in self.tokens:
            for run_id in self.run_ids(who):
                self.call("GetRun", runtime_service_pb2.GetRunRequest(run_id=run_id), who)


def refusal(error: grpc.RpcError) -> Refusal:
    call: Any = error
    status = rpc_status.from_call(call)
    reason, fields = "", []
    for detail in status.details if status else []:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason = info.reason
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            fields = [v.field for v in bad.field_violations]
    trailers = sum(len(k) + len(v) for k, v in call.trailing_metadata() or ())
    return Refusal(call.code(), reason, fields, trailers)


def assert_invalid(refused: Refusal, field: str) -> None:
    assert refused.code == grpc.StatusCode.INVALID_ARGUMENT, refused
    assert any(f == field or f.startswith(field) for f in refused.fields), refused
    assert refused.trailer_bytes < 2048, refused


def start(input_text: str = "hello", **fields: Any) -> runtime_service_pb2.StartRunRequest:
    return runtime_service_pb2.StartRunRequest(agent_name="echo", input=input_text, **fields)


def _config(path: Path, *, db_url: str) -> Path:
    tokens_file = path.parent / "tokens.toml"
    text = ""
    for name, (tenant, roles) in TENANTS.items():
        digest = hashlib.sha256(f"tok-{name}".encode()).hexdigest()
        text += f'[[tokens]]\nsha256 = "{digest}"\nsubject = "{name}"\ntenant = "{tenant}"\n'
        text += f"roles = {toml_value(roles)}\n"
    tokens_file.write_text(text)
    config = (
        f'db_url = "{db_url}"\nlisten = "127.0.0.1:0"\npoll_interval_s = 0.1\nlease_ttl_s = 3.0\n'
        f'grace_s = 1.0\n[auth]\ntokens_file = "{tokens_file}"\n'
        "[limits]\nmax_metadata_bytes = 2048\nmax_metadata_entries = 8\n"
    )
    config += agent_toml("echo", steps=DONE, tools=[], budgets={"timeout_s": 60})
    path.write_text(config)
    return path


@contextlib.contextmanager
def _serve(root: Path, db_url: str) -> Iterator[Stack]:
    config = _config(root / "agentrt.toml", db_url=db_url)
    with spawn_runtime(["--config", str(config)], cwd=root) as runtime:
        channel = grpc.insecure_channel(runtime.address)
        try:
            yield Stack(runtime, channel, {name: f"tok-{name}" for name in TENANTS})
        finally:
            channel.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # One server for the module: every test checks its refusals wrote nothing, so they can share it.
    root = tmp_path_factory.mktemp("hostile")
    with _serve(root, f"sqlite:///{root / 'agentrt.sqlite'}") as made:
        # Each tenant has a run, so "every caller still works" has something to read.
        for who in TENANTS:
            made.call("StartRun", start(f"first run of {who}"), who)
        yield made


# -- numbers ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cost", [-1, -(2**63), MAX_COST_MICROS + 1, 2**63 - 1])
def test_out_of_range_cost_is_refused_and_runs_stay_readable(stack: Stack, cost: int) -> None:
    before = stack.run_ids()
    refused = stack.refused("StartRun", start(budgets=run_pb2.Budgets(max_cost_micros=cost)))
    assert_invalid(refused, "budgets.max_cost_micros")
    refused = stack.refused(
        "RunAgent",
        runtime_service_pb2.RunAgentRequest(
            agent_name="echo", input="x", budgets=run_pb2.Budgets(max_cost_micros=cost)
        ),
    )
    assert_invalid(refused, "budgets.max_cost_micros")
    assert stack.run_ids() == before
    stack.assert_healthy()


@pytest.mark.parametrize(
    ("budgets", "field"),
    [
        (run_pb2.Budgets(max_calls_per_tool={"orders.lookup": -1}), "budgets.max_calls_per_tool"),
        (
            run_pb2.Budgets(max_calls_per_tool={"ok": 1, "bad name with spaces": 1}),
            "budgets.max_calls_per_tool",
        ),
        (run_pb2.Budgets(max_calls_per_tool={f"t{i}": 1 for i in range(300)}), "budgets.max_calls_per_tool"),
        (run_pb2.Budgets(max_model_steps=-3), "budgets.max_model_steps"),
        (run_pb2.Budgets(max_tool_calls=-1), "budgets.max_tool_calls"),
        (run_pb2.Budgets(max_handoffs=-1), "budgets.max_handoffs"),
        (run_pb2.Budgets(max_parallel_tool_calls=-1), "budgets.max_parallel_tool_calls"),
        (run_pb2.Budgets(max_input_tokens=-5), "budgets.max_input_tokens"),
        (run_pb2.Budgets(max_output_tokens=2**62), "budgets.max_output_tokens"),
        (run_pb2.Budgets(timeout=duration_pb2.Duration(seconds=-1)), "budgets.timeout"),
        (run_pb2.Budgets(timeout=duration_pb2.Duration(seconds=1, nanos=-5)), "budgets.timeout"),
        (run_pb2.Budgets(timeout=duration_pb2.Duration(seconds=10**15)), "budgets.timeout"),
        (run_pb2.Budgets(timeout=duration_pb2.Duration(seconds=10**6)), "budgets.timeout"),
    ],
)
def test_budgets_out_of_range_are_refused(stack: Stack, budgets: run_pb2.Budgets, field: str) -> None:
    before = stack.run_ids()
    assert_invalid(stack.refused("StartRun", start(budgets=budgets)), field)
    assert stack.run_ids() == before


def test_per_tool_budget_of_zero_and_positive_values_are_accepted(stack: Stack) -> None:
    reply = stack.call("StartRun", start(budgets=run_pb2.Budgets(max_calls_per_tool={"a.b": 0, "c": 3})))
    assert dict(reply.run.budgets.max_calls_per_tool) == {"a.b": 0, "c": 3}
    stack.assert_healthy()


# -- enums --------------------------------------------------------------------------------------------


def test_out_of_range_enums_are_invalid_argument(stack: Stack) -> None:
    run_id = stack.run_ids()[0]
    cases: list[tuple[str, Any, str]] = [
        ("StartRun", start(session_id="s1", session_policy=99), "session_policy"),
        (
            "RunAgent",
            runtime_service_pb2.RunAgentRequest(agent_name="echo", input="x", session_policy=-7),
            "session_policy",
        ),
        (
            "ResolveApproval",
            runtime_service_pb2.ResolveApprovalRequest(run_id=run_id, approval_id="a", decision=42),
            "decision",
        ),
        (
            "ResolveOutcome",
            runtime_service_pb2.ResolveOutcomeRequest(run_id=run_id, call_id="c", decision=42),
            "decision",
        ),
        (
            "ListRuns",
            runtime_service_pb2.ListRunsRequest(phases=[run_pb2.RUN_PHASE_COMPLETED, 1234]),
            "phases",
        ),
        ("ListRuns", runtime_service_pb2.ListRunsRequest(phases=[-1]), "phases"),
    ]
    before = stack.run_ids()
    for method, request, field in cases:
        assert_invalid(stack.refused(method, request), field)
    assert stack.run_ids() == before
    stack.assert_healthy()


# -- ids ----------------------------------------------------------------------------------------------


LONG = "r" * 5000


@pytest.mark.parametrize(
    ("method", "request_", "field"),
    [
        ("GetRun", runtime_service_pb2.GetRunRequest(run_id=LONG), "run_id"),
        ("CancelRun", runtime_service_pb2.CancelRunRequest(run_id=LONG), "run_id"),
        ("StreamRunEvents", runtime_service_pb2.StreamRunEventsRequest(run_id=LONG, follow=True), "run_id"),
        (
            "ResolveApproval",
            runtime_service_pb2.ResolveApprovalRequest(
                run_id=LONG, approval_id="a", decision=run_pb2.APPROVAL_DECISION_APPROVE
            ),
            "run_id",
        ),
        (
            "ResolveApproval",
            runtime_service_pb2.ResolveApprovalRequest(
                run_id="x", approval_id=LONG, decision=run_pb2.APPROVAL_DECISION_APPROVE
            ),
            "approval_id",
        ),
        (
            "ResolveOutcome",
            runtime_service_pb2.ResolveOutcomeRequest(
                run_id="x", call_id=LONG, decision=runtime_service_pb2.OUTCOME_DECISION_FAILED
            ),
            "call_id",
        ),
        ("GetPayload", runtime_service_pb2.GetPayloadRequest(run_id=LONG, payload_id="p"), "run_id"),
        ("GetPayload", runtime_service_pb2.GetPayloadRequest(run_id="x", payload_id=LONG), "payload_id"),
        ("StartRun", start(request_key=LONG), "request_key"),
        ("StartRun", start(session_id=LONG), "session_id"),
        ("StartRun", start(request_key="has space"), "request_key"),
        ("StartRun", start(session_id="caf\u00e9"), "session_id"),
        ("GetRun", runtime_service_pb2.GetRunRequest(run_id="run\nid"), "run_id"),
        ("ListRuns", runtime_service_pb2.ListRunsRequest(session_id=LONG), "session_id"),
        ("ListRuns", runtime_service_pb2.ListRunsRequest(agent_name=LONG), "agent_name"),
    ],
)
def test_long_or_odd_ids_are_refused_with_small_trailers(
    stack: Stack, method: str, request_: Any, field: str
) -> None:
    before = stack.run_ids()
    refused = stack.refused(method, request_)
    assert_invalid(refused, field)
    assert stack.run_ids() == before


# -- metadata -----------------------------------------------------------------------------------------


def test_metadata_over_its_byte_limit_is_refused(stack: Stack) -> None:
    before = stack.run_ids()
    assert_invalid(stack.refused("StartRun", start(metadata={"k": "v" * 3000})), "metadata")
    assert_invalid(
        stack.refused("StartRun", start(metadata={f"k{i}": "v" * 400 for i in range(6)})), "metadata"
    )
    assert_invalid(stack.refused("StartRun", start(metadata={"bad key": "v"})), "metadata")
    assert stack.run_ids() == before


def test_runs_with_large_metadata_leave_listing_working(stack: Stack) -> None:
    # Each run holds as much metadata as allowed; a full page of them must still list.
    for i in range(8):
        stack.call("StartRun", start(f"big {i}", metadata={f"k{j}": "x" * 250 for j in range(7)}))
    reply = stack.call("ListRuns", runtime_service_pb2.ListRunsRequest(page_size=500))
    assert len(reply.runs) >= 8
    stack.assert_healthy()


# -- page tokens --------------------------------------------------------------------------------------


def _pages(stack: Stack, request: runtime_service_pb2.ListRunsRequest) -> list[str]:
    seen: list[str] = []
    while True:
        reply = stack.call("ListRuns", request)
        seen += [r.run_id for r in reply.runs]
        if not reply.next_page_token:
            return seen
        request = runtime_service_pb2.ListRunsRequest(
            page_size=request.page_size, page_token=reply.next_page_token
        )


def test_page_tokens_page_and_forged_ones_are_refused(stack: Stack) -> None:
    for i in range(5):
        stack.call("StartRun", start(f"paged {i}"))
    assert sorted(_pages(stack, runtime_service_pb2.ListRunsRequest(page_size=2))) == sorted(stack.run_ids())
    genuine = stack.call("ListRuns", runtime_service_pb2.ListRunsRequest(page_size=2)).next_page_token
    body, _, mac = genuine.partition(".")
    forged_body = base64.urlsafe_b64encode(json.dumps([10**30, "z"]).encode()).decode().rstrip("=")
    old_style = base64.urlsafe_b64encode(json.dumps([2**70, "z"]).encode()).decode()
    for token in [
        old_style,  # the unsigned format of before, with a huge number
        f"{forged_body}.{mac}",  # another cursor under a genuine MAC
        body + "." + mac[:-2] + ("AA" if not mac.endswith("AA") else "BB"),
        "x" * 5000,
        "not a token at all",
        "\u00e9.\u00e9",
    ]:
        assert_invalid(
            stack.refused("ListRuns", runtime_service_pb2.ListRunsRequest(page_size=2, page_token=token)),
            "page_token",
        )
    # A token opens only the listing it came from: not with other filters, not for another tenant.
    other_filter = runtime_service_pb2.ListRunsRequest(
        page_size=2, page_token=genuine, phases=[run_pb2.RUN_PHASE_COMPLETED]
    )
    assert_invalid(stack.refused("ListRuns", other_filter), "page_token")
    other_tenant = runtime_service_pb2.ListRunsRequest(page_size=2, page_token=genuine)
    assert_invalid(stack.refused("ListRuns", other_tenant, who="carol"), "page_token")
    stack.assert_healthy()


# -- request keys -------------------------------------------------------------------------------------


def test_request_key_with_another_request_is_already_exists(stack: Stack) -> None:
    key = f"key-{uuid.uuid4().hex}"
    first = stack.call("StartRun", start("refund A100", request_key=key)).run
    again = stack.call("StartRun", start("refund A100", request_key=key)).run
    assert again.run_id == first.run_id
    # RunAgent with the identical request is a retry too.
    events = stack.call(
        "RunAgent",
        runtime_service_pb2.RunAgentRequest(agent_name="echo", input="refund A100", request_key=key),
    )
    assert {e.event.run_id for e in events} == {first.run_id}
    before = stack.run_ids()
    for different in [
        start("refund B200", request_key=key),
        start("refund A100", request_key=key, metadata={"crm": "1"}),
        start("refund A100", request_key=key, session_id="sess-1"),
        start("refund A100", request_key=key, budgets=run_pb2.Budgets(max_model_steps=3)),
        runtime_service_pb2.StartRunRequest(agent_name="other", input="refund A100", request_key=key),
    ]:
        refused = stack.refused("StartRun", different)
        assert refused.code in {grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.NOT_FOUND}, refused
        if different.agent_name == "echo":
            assert refused.code == grpc.StatusCode.ALREADY_EXISTS
            assert refused.reason == "REQUEST_KEY_REUSED"
    assert stack.run_ids() == before
    # Keys are per tenant: another tenant may use the same one for its own request.
    other = stack.call("StartRun", start("something else", request_key=key), who="carol").run
    assert other.run_id != first.run_id


def _concurrently(count: int, work: Callable[[int], Any]) -> list[Any]:
    results: list[Any] = [None] * count
    barrier = threading.Barrier(count)

    def run(i: int) -> None:
        barrier.wait(timeout=30)
        try:
            results[i] = work(i)
        except grpc.RpcError as exc:
            results[i] = refusal(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


@pytest.mark.parametrize(
    ("session", "policy"),
    [
        ("", runtime_service_pb2.SESSION_POLICY_UNSPECIFIED),
        ("sess-c", runtime_service_pb2.SESSION_POLICY_ENQUEUE),
        ("sess-r", runtime_service_pb2.SESSION_POLICY_REJECT),
    ],
)
def test_request_key_reuse_under_concurrency(tmp_path: Path, db_url: str, session: str, policy: int) -> None:
    with _serve(tmp_path, db_url) as stack:
        _check_concurrent_keys(stack, session, policy)


def _check_concurrent_keys(stack: Stack, session: str, policy: int) -> None:
    key = f"conc-{uuid.uuid4().hex}"

    def different(i: int) -> Any:
        return stack.call(
            "StartRun", start(f"input {i}", request_key=key, session_id=session, session_policy=policy)
        )

    results = _concurrently(20, different)
    created = [r for r in results if not isinstance(r, Refusal)]
    refused = [r for r in results if isinstance(r, Refusal)]
    assert len(created) == 1, results
    assert len(refused) == 19
    assert all(r.code == grpc.StatusCode.ALREADY_EXISTS and r.reason == "REQUEST_KEY_REUSED" for r in refused)
    assert stack.run_ids() == [created[0].run.run_id]

    same_key = f"same-{uuid.uuid4().hex}"
    # Another session: under the reject policy the first batch's run may still be active.
    second = f"{session}-2" if session else ""

    def same(i: int) -> Any:
        return stack.call(
            "StartRun", start("one input", request_key=same_key, session_id=second, session_policy=policy)
        )

    answers = _concurrently(20, same)
    assert not [a for a in answers if isinstance(a, Refusal)], answers
    assert len({a.run.run_id for a in answers}) == 1
    assert len(stack.run_ids()) == 2
    stack.assert_healthy()


# -- other fields and malformed bytes -----------------------------------------------------------------


def test_free_text_and_json_fields_are_bounded(stack: Stack) -> None:
    run_id = stack.run_ids()[0]
    deep = "[" * 100_000 + "]" * 100_000
    cases: list[tuple[str, Any, str]] = [
        ("CancelRun", runtime_service_pb2.CancelRunRequest(run_id=run_id, reason="x" * 5000), "reason"),
        (
            "ResolveOutcome",
            runtime_service_pb2.ResolveOutcomeRequest(
                run_id=run_id,
                call_id="c",
                decision=runtime_service_pb2.OUTCOME_DECISION_SUCCEEDED,
                result_json=deep,
            ),
            "result_json",
        ),
        (
            "ResolveOutcome",
            runtime_service_pb2.ResolveOutcomeRequest(
                run_id=run_id,
                call_id="c",
                decision=runtime_service_pb2.OUTCOME_DECISION_SUCCEEDED,
                result_json="NaN",
            ),
            "result_json",
        ),
        (
            "ResolveApproval",
            runtime_service_pb2.ResolveApprovalRequest(
                run_id=run_id,
                approval_id="a",
                decision=run_pb2.APPROVAL_DECISION_APPROVE,
                comment="c" * 10_000,
            ),
            "comment",
        ),
    ]
    for method, request, field in cases:
        assert_invalid(stack.refused(method, request), field)
    stack.assert_healthy()


def test_nul_characters_in_stored_text_are_refused(stack: Stack) -> None:
    # PostgreSQL text cannot hold NUL: before, the insert failed as INTERNAL on one backend only.
    run_id = stack.run_ids()[0]
    before = stack.run_ids()
    assert_invalid(stack.refused("StartRun", start("hello\x00world")), "input")
    assert_invalid(
        stack.refused("CancelRun", runtime_service_pb2.CancelRunRequest(run_id=run_id, reason="a\x00b")),
        "reason",
    )
    assert stack.run_ids() == before
    # Inside metadata values (stored as JSON) a NUL is escaped and harmless.
    stack.call("StartRun", start("nul in metadata", metadata={"k": "a\x00b"}))
    stack.assert_healthy()


@pytest.mark.parametrize("garbage", [b"\xff\xff\xff\xff", b"\x0a\x05ab", b"\x0a\x02\xc3\x28", b"\x08" * 11])
def test_malformed_request_bytes_are_invalid_argument_after_authentication(
    stack: Stack, garbage: bytes
) -> None:
    # The third is a string field 1 holding invalid UTF-8; ListRuns' field 1 is a number.
    methods = ["GetRun", "StartRun", "StreamRunEvents"] + (["ListRuns"] if b"\xc3" not in garbage else [])
    for method in methods:
        path = f"/agentrt.runtime.v1.AgentRuntimeService/{method}"
        streaming = method == "StreamRunEvents"
        rpc = (stack.channel.unary_stream if streaming else stack.channel.unary_unary)(path)
        with pytest.raises(grpc.RpcError) as caught:
            reply = rpc(garbage, metadata=stack.auth(), timeout=10)
            if streaming:
                list(reply)
        refused = refusal(caught.value)
        assert refused.code == grpc.StatusCode.INVALID_ARGUMENT, (method, refused)
        assert refused.fields == ["request"]
        # Without a credential the caller learns only that it is not authenticated.
        with pytest.raises(grpc.RpcError) as anonymous:
            reply = rpc(garbage, timeout=10)
            if streaming:
                list(reply)
        assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED
    stack.assert_healthy()
