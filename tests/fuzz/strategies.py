"""Hypothesis strategies for hostile but well-typed request messages of both services.

Every request message of AgentRuntimeService and ToolHostService has a strategy here. Values
are what a careless or hostile client sends: NaN, infinities, huge and negative numbers,
enum ints the contract does not know, ids that are huge or full of NUL, control, bidi and
non-BMP characters, deep or huge JSON, big metadata maps, forged page tokens, inline agents
with odd model options. Real ids (the fuzz tenant's runs, another tenant's run, a pending
approval) come from :class:`Targets`, so some calls reach past the edge checks.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import duration_pb2, struct_pb2
from hypothesis import strategies as st

from agentrt.proto.runtime.v1 import run_pb2
from agentrt.proto.runtime.v1 import runtime_service_pb2 as rt
from agentrt.proto.toolhost.v1 import tool_host_service_pb2 as th

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
KNOWN_TOOLS = ("orders.lookup", "noop.echo", "refund.issue", "sleep.wait")

# Characters that break naive handling: NUL and other controls, bidi overrides, line and
# paragraph separators, BOM, noncharacters, the last code point, astral and combining marks,
# and the punctuation of paths, format strings, SQL and JSON.
ODD_CHARS = (
    "\x00\x01\x07\x1b\x7f\x85\xa0\u0301\u200b\u200e\u202e\u2028\u2029\ufeff\ufffd\ufffe\uffff"
    "\U0001f600\U0010ffff\U000e0001/\\.%:;,'\"`$<>{}[]|*?&=#+\t\n\r -_"
)
EDGE_STRINGS = (
    "",
    " ",
    "\x00",
    "a\x00b",
    "../../etc/passwd",
    "%s%s%n%x",
    "' OR 1=1 --",
    "run-" + "9" * 30,
    "\U0010ffff\U0010ffff",
    "\u202e\u202e",
    "null",
    "NaN",
    "-0",
)
NUMBER_STRINGS = ("NaN", "Infinity", "-Infinity", "1e999999", "-1e999999", "1" * 400, "0x10", "1_000")


def _no_surrogates() -> st.SearchStrategy[str]:
    # Protobuf strings are UTF-8, so a lone surrogate cannot even be serialised by the client.
    return st.characters(codec="utf-8")


def odd_text(*, max_size: int = 40) -> st.SearchStrategy[str]:
    return st.text(alphabet=st.sampled_from(ODD_CHARS) | _no_surrogates(), max_size=max_size)


def huge_text() -> st.SearchStrategy[str]:
    return st.builds(
        lambda n, unit: unit * n,
        st.sampled_from((41, 64, 65, 129, 200, 201, 256, 1025, 3000, 5000, 70_000, 300_000)),
        st.sampled_from(("a", "é", "\x00", "\U0001f600", "\u202e", "\U0010ffff")),
    )


def hostile_text(*, small: bool = False) -> st.SearchStrategy[str]:
    parts = [st.sampled_from(EDGE_STRINGS), odd_text()]
    if not small:
        parts.append(huge_text())
    return st.one_of(*parts)


def int32s() -> st.SearchStrategy[int]:
    return st.sampled_from((0, -1, 1, 2, INT32[0], INT32[1], 1000, 10**9)) | st.integers(*INT32)


def int64s() -> st.SearchStrategy[int]:
    return st.sampled_from((0, -1, 1, INT64[0], INT64[1], 2**53 + 1, 10**15)) | st.integers(*INT64)


def doubles() -> st.SearchStrategy[float]:
    edges = (float("nan"), float("inf"), float("-inf"), -0.0, -1.0, 1e308, -1e308, 5e-324, 1e-9)
    return st.sampled_from(edges) | st.floats(allow_nan=True, allow_infinity=True)


def enum_ints(known: int) -> st.SearchStrategy[int]:
    """Values of an open proto3 enum with ``known`` members: known ones and unknown ones."""
    return st.integers(0, known - 1) | st.sampled_from((known, known + 1, 99, -1, INT32[0], INT32[1]))


def durations() -> st.SearchStrategy[duration_pb2.Duration]:
    return st.builds(
        duration_pb2.Duration,
        seconds=st.sampled_from((0, 1, -1, 315_576_000_000, 315_576_000_001, INT64[1], INT64[0]))
        | st.integers(-(10**6), 10**6),
        nanos=st.sampled_from((0, 1, -1, 999_999_999, 1_000_000_000, INT32[1], INT32[0])),
    )


def deep_json(depth: int, *, kind: str) -> str:
    if kind == "list":
        return "[" * depth + "]" * depth
    if kind == "object":
        return '{"a":' * depth + "1" + "}" * depth
    return "[" * depth  # unterminated


def json_texts() -> st.SearchStrategy[str]:
    """Strings sent where the contract wants JSON: valid, deep, huge, malformed, non-finite."""
    json_values = st.recursive(
        st.none() | st.booleans() | int64s() | st.floats(allow_nan=False) | hostile_text(small=True),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(hostile_text(small=True), inner, max_size=4)
        ),
        max_leaves=12,
    )
    return st.one_of(
        json_values.map(json.dumps),
        st.builds(
            deep_json,
            st.sampled_from((64, 101, 1000, 100_000)),
            kind=st.sampled_from(("list", "object", "open")),
        ),
        st.sampled_from(NUMBER_STRINGS),
        st.sampled_from(('{"a":1,"a":2}', "{", "", "[1,]", '"\\ud800"', '{"\x00":1}', "\ufeff{}")),
        st.builds(lambda n: json.dumps({"blob": "z" * n}), st.sampled_from((65_536, 1_000_000))),
        hostile_text(small=True),
    )


def struct_values() -> st.SearchStrategy[struct_pb2.Value]:
    def number(x: float) -> struct_pb2.Value:
        return struct_pb2.Value(number_value=x)

    return st.one_of(
        doubles().map(number),
        hostile_text(small=True).map(lambda s: struct_pb2.Value(string_value=s)),
        st.booleans().map(lambda b: struct_pb2.Value(bool_value=b)),
        st.just(struct_pb2.Value(null_value=struct_pb2.NULL_VALUE)),
    )


DEEP_MARK = "__deep__"


def deepen(options: struct_pb2.Struct) -> None:
    """Nest ``options`` as deep as its mark says, in place.

    Copying a message (CopyFrom, or passing it to a constructor) parses it again, and the
    parse stops at protobuf's depth limit, so a Struct past that limit is only built where it
    will be sent.
    """
    if DEEP_MARK not in options.fields:
        return
    depth = int(options.fields[DEEP_MARK].number_value)
    del options.fields[DEEP_MARK]
    node = options
    for _ in range(depth):
        node = node.fields["a"].struct_value
    node.fields["leaf"].number_value = 1.0


@st.composite
def model_options(draw: st.DrawFn) -> struct_pb2.Struct:
    options = struct_pb2.Struct()
    choice = draw(st.sampled_from(("steps", "odd", "deep", "empty")))
    if choice == "deep":
        options.fields[DEEP_MARK].number_value = draw(st.sampled_from((30, 99, 101, 200)))
        return options
    if choice == "steps":
        steps = draw(st.lists(scripted_steps(), max_size=4))
        options.update({"steps": steps})
    else:
        for key in draw(st.lists(hostile_text(small=True), max_size=4)):
            options.fields[key].CopyFrom(draw(struct_values()))
    return options


@st.composite
def scripted_steps(draw: st.DrawFn) -> dict[str, Any]:
    step: dict[str, Any] = {"text": draw(hostile_text(small=True))}
    calls = []
    for _ in range(draw(st.integers(0, 2))):
        arguments: Any = draw(
            st.sampled_from(
                ({"order_id": "A100"}, {"text": "hi"}, {}, [1, 2], "x", None, {"text": "\x00" * 100})
            )
        )
        calls.append(
            {
                "tool": draw(st.sampled_from(("orders.lookup", "noop.echo")) | hostile_text(small=True)),
                "arguments": arguments,
            }
        )
    if calls:
        step["tool_calls"] = calls
    return step


@st.composite
def budgets(draw: st.DrawFn) -> run_pb2.Budgets | None:
    if draw(st.booleans()):
        return None
    b = run_pb2.Budgets(
        max_model_steps=draw(int32s()),
        max_tool_calls=draw(int32s()),
        max_input_tokens=draw(int64s()),
        max_output_tokens=draw(int64s()),
        max_cost_micros=draw(int64s()),
        max_handoffs=draw(int32s()),
        max_parallel_tool_calls=draw(int32s()),
    )
    if draw(st.booleans()):
        b.timeout.CopyFrom(draw(durations()))
    tools = st.sampled_from(KNOWN_TOOLS) | hostile_text(small=True)
    for name, limit in draw(st.dictionaries(tools, int32s(), max_size=4)).items():
        b.max_calls_per_tool[name] = limit
    return b


def metadata_maps() -> st.SearchStrategy[dict[str, str]]:
    return st.one_of(
        st.dictionaries(hostile_text(small=True), hostile_text(), max_size=4),
        st.builds(lambda n: {f"k{i}": "v" * 64 for i in range(n)}, st.sampled_from((17, 65, 1000))),
        st.builds(lambda n: {"big": "v" * n}, st.sampled_from((4097, 65_537, 1_000_000))),
    )


@st.composite
def inline_agents(draw: st.DrawFn) -> run_pb2.AgentSpec:
    spec = run_pb2.AgentSpec(
        name=draw(st.sampled_from(("inline", "refunder")) | hostile_text()),
        instructions=draw(hostile_text()),
        tools=draw(st.lists(st.sampled_from(KNOWN_TOOLS) | hostile_text(small=True), max_size=3)),
        handoffs=draw(
            st.lists(st.sampled_from(("refunder", "echo-only")) | hostile_text(small=True), max_size=2)
        ),
        agent_tools=draw(st.lists(st.sampled_from(("refunder",)) | hostile_text(small=True), max_size=2)),
    )
    spec.model.provider = draw(
        st.sampled_from(("scripted", "", "openai", "SCRIPTED")) | hostile_text(small=True)
    )
    spec.model.name = draw(st.sampled_from(("", "m")) | hostile_text())
    spec.model.profile = draw(st.sampled_from(("scripted", "")) | hostile_text(small=True))
    if draw(st.booleans()):
        spec.model.options.CopyFrom(draw(model_options()))
    b = draw(budgets())
    if b is not None:
        spec.budgets.CopyFrom(b)
    return spec


@dataclass
class Targets:
    """Real ids the strategies mix with hostile ones; filled and refreshed by the harness.

    Strategies draw an index and resolve it when the example is built, so what hypothesis
    draws does not depend on how many runs exist (that would make generation flaky).
    """

    fuzz_runs: list[str] = field(default_factory=list)
    bystander_run: str = ""
    approval_run: str = ""
    approval_id: str = ""
    args_hash: str = ""
    page_token: str = ""

    def run_id(self, index: int) -> str:
        real = [self.approval_run, self.bystander_run, *self.fuzz_runs[-4:]]
        return real[index % len(real)]

    def run_ids(self) -> st.SearchStrategy[str]:
        return st.integers(0, 5).map(self.run_id) | hostile_text()

    def approval_ids(self) -> st.SearchStrategy[str]:
        return st.just(0).map(lambda _: self.approval_id) | hostile_text()

    def args_hashes(self) -> st.SearchStrategy[str]:
        return (
            st.sampled_from(("real", "")).map(lambda k: self.args_hash if k == "real" else "")
            | hostile_text()
        )

    def tampered_token(self, position: int) -> str:
        token = self.page_token
        if not token:
            return ""
        i = position % len(token)
        return token[:i] + ("A" if token[i] != "A" else "B") + token[i + 1 :]

    def page_tokens(self) -> st.SearchStrategy[str]:
        return st.just(0).map(lambda _: self.page_token) | st.integers(0, 200).map(self.tampered_token)


def forged_page_tokens(targets: Targets) -> st.SearchStrategy[str]:
    def b64(value: Any) -> str:
        raw = value if isinstance(value, bytes) else json.dumps(value).encode()
        return base64.urlsafe_b64encode(raw).decode()

    shapes: list[Any] = [
        [10**30, "run"],
        [-(10**30), "run"],
        [2**63, "x" * 300],
        ["a", 1],
        [None, None],
        [1, 2, 3],
        [],
        {"o": 1},
        b"\xff\xfe\x00",
        b'[1e999, "r"]',
        b'[NaN, "r"]',
        b"[" * 500,
    ]
    return st.one_of(st.sampled_from([b64(s) for s in shapes]), targets.page_tokens(), hostile_text())


# --- one strategy per request message ------------------------------------------------------


@st.composite
def _start_fields(draw: st.DrawFn, targets: Targets) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "input": draw(hostile_text() | json_texts()),
        "request_key": draw(st.just("") | hostile_text()),
        "metadata": draw(metadata_maps()),
        "session_id": draw(st.just("") | st.sampled_from(("fuzz-session",)) | hostile_text()),
        "session_policy": draw(enum_ints(4)),
    }
    if draw(st.booleans()):
        fields["agent"] = draw(inline_agents())
    else:
        fields["agent_name"] = draw(
            st.sampled_from(("refunder", "echo-only", "small-refund")) | hostile_text()
        )
    b = draw(budgets())
    if b is not None:
        fields["budgets"] = b
    return fields


def _deepened(request: Any) -> Any:
    deepen(request.agent.model.options)
    return request


def run_agent_requests(targets: Targets) -> st.SearchStrategy[rt.RunAgentRequest]:
    return _start_fields(targets).map(lambda f: _deepened(rt.RunAgentRequest(**f)))


def start_run_requests(targets: Targets) -> st.SearchStrategy[rt.StartRunRequest]:
    return _start_fields(targets).map(lambda f: _deepened(rt.StartRunRequest(**f)))


def get_run_requests(targets: Targets) -> st.SearchStrategy[rt.GetRunRequest]:
    return st.builds(rt.GetRunRequest, run_id=targets.run_ids())


def get_run_diagnostics_requests(targets: Targets) -> st.SearchStrategy[rt.GetRunDiagnosticsRequest]:
    return st.builds(rt.GetRunDiagnosticsRequest, run_id=targets.run_ids())


def list_runs_requests(targets: Targets) -> st.SearchStrategy[rt.ListRunsRequest]:
    return st.builds(
        rt.ListRunsRequest,
        page_size=int32s(),
        page_token=forged_page_tokens(targets),
        phases=st.lists(enum_ints(len(run_pb2.RunPhase.values())), max_size=5),
        agent_name=st.sampled_from(("", "refunder")) | hostile_text(),
        session_id=st.sampled_from(("", "fuzz-session")) | hostile_text(),
        needs_attention=st.booleans(),
        cleanup_unknown=st.booleans(),
    )


def stream_run_events_requests(targets: Targets) -> st.SearchStrategy[rt.StreamRunEventsRequest]:
    return st.builds(
        rt.StreamRunEventsRequest, run_id=targets.run_ids(), after_seq=int64s(), follow=st.booleans()
    )


def cancel_run_requests(targets: Targets) -> st.SearchStrategy[rt.CancelRunRequest]:
    return st.builds(rt.CancelRunRequest, run_id=targets.run_ids(), reason=hostile_text())


def resolve_approval_requests(targets: Targets) -> st.SearchStrategy[rt.ResolveApprovalRequest]:
    return st.builds(
        rt.ResolveApprovalRequest,
        run_id=targets.run_ids(),
        approval_id=targets.approval_ids(),
        decision=enum_ints(3),
        args_hash=targets.args_hashes(),
        expected_revision=int64s(),
        comment=hostile_text(),
    )


def resolve_outcome_requests(targets: Targets) -> st.SearchStrategy[rt.ResolveOutcomeRequest]:
    return st.builds(
        rt.ResolveOutcomeRequest,
        run_id=targets.run_ids(),
        call_id=st.sampled_from(("call_1_0", "call_2_0")) | hostile_text(),
        decision=enum_ints(4),
        result_json=json_texts(),
        expected_revision=int64s(),
        comment=hostile_text(),
    )


def get_payload_requests(targets: Targets) -> st.SearchStrategy[rt.GetPayloadRequest]:
    return st.builds(
        rt.GetPayloadRequest,
        run_id=targets.run_ids(),
        payload_id=st.sampled_from(("", "0" * 64, "p-1")) | hostile_text(),
    )


# --- tool host -------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostCall:
    """A tool host request plus the call headers sent with it (a grant is signed to match them)."""

    request: Any
    run_id: str
    call_id: str
    idempotency_key: str
    attempt: str
    fencing: str
    signed: bool


@st.composite
def _host_headers(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "run_id": draw(st.sampled_from(("run-fuzz",)) | hostile_text(small=True)),
        "call_id": draw(st.sampled_from(("call_1_0",)) | hostile_text(small=True)),
        "idempotency_key": draw(st.uuids().map(str) | hostile_text()),
        "attempt": draw(st.sampled_from(("1", "0", "-1", "1" * 40, "x", "")) | hostile_text(small=True)),
        "fencing": draw(
            st.sampled_from(("1", "0", "-1", str(2**63), "9" * 30, "1e3", "")) | int64s().map(str)
        ),
        "signed": draw(st.booleans() | st.just(True)),
    }


def _tool_names() -> st.SearchStrategy[str]:
    return st.sampled_from(KNOWN_TOOLS) | hostile_text()


def _tool_arguments() -> st.SearchStrategy[str]:
    good = st.sampled_from(
        (
            '{"order_id": "A100"}',
            '{"text": "hi"}',
            '{"order_id": "A100", "amount": 1e308, "reason": "x"}',
            '{"order_id": "A100", "amount": -5, "reason": "x"}',
            '{"seconds": 1e308}',
            '{"seconds": -1}',
        )
    )
    return good | json_texts()


@st.composite
def invoke_tool_calls(draw: st.DrawFn) -> HostCall:
    request = th.InvokeToolRequest(tool=draw(_tool_names()), arguments_json=draw(_tool_arguments()))
    return HostCall(request=request, **draw(_host_headers()))


@st.composite
def preview_tool_calls(draw: st.DrawFn) -> HostCall:
    request = th.PreviewToolRequest(tool=draw(_tool_names()), arguments_json=draw(_tool_arguments()))
    return HostCall(request=request, **draw(_host_headers()))


@st.composite
def get_operation_calls(draw: st.DrawFn) -> HostCall:
    headers = draw(_host_headers())
    request = th.GetOperationRequest(idempotency_key=headers["idempotency_key"])
    return HostCall(request=request, **headers)


@st.composite
def cancel_operation_calls(draw: st.DrawFn) -> HostCall:
    headers = draw(_host_headers())
    # The grant binds the header's key: mostly the same key, sometimes another one or junk.
    key = draw(st.one_of(st.just(headers["idempotency_key"]), st.text(max_size=200)))
    request = th.CancelOperationRequest(idempotency_key=key, reason=draw(st.text(max_size=600)))
    return HostCall(request=request, **headers)


@st.composite
def list_tools_calls(draw: st.DrawFn) -> HostCall:
    return HostCall(request=th.ListToolsRequest(), **draw(_host_headers()))
