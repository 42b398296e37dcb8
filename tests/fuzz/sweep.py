"""A deterministic sweep: each field of each request, one at a time, set to each edge value.

The other fields keep a valid baseline, so every case tests one field's handling (hypothesis
mixes many at once and may stop at the first failure). Nested messages (budgets, the inline
agent and its model, durations) are swept field by field too; tool host calls also sweep
their call headers.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, cast

from google.protobuf import descriptor, message

from agentrt.proto.runtime.v1 import run_pb2
from agentrt.proto.runtime.v1 import runtime_service_pb2 as rt
from agentrt.proto.toolhost.v1 import tool_host_service_pb2 as th
from tests.fuzz.strategies import DEEP_MARK, INT32, INT64, HostCall, Targets, deep_json, deepen

FD = descriptor.FieldDescriptor
STRINGS: tuple[str, ...] = (
    "",
    "a\x00b",
    "../../etc/passwd",
    "\u202e\u2028\ufeff\uffff",
    "\U0010ffff" * 64,
    "é" * 3000,
    "x" * 300_000,
)
JSON_STRINGS: tuple[str, ...] = (
    "NaN",
    "1e999999",
    '{"a": 1, "a": 2}',
    "{",
    deep_json(101, kind="list"),
    deep_json(100_000, kind="object"),
    '{"text": "' + "z" * 1_000_000 + '"}',
)
NUMBERS: dict[int, tuple[Any, ...]] = {
    FD.TYPE_INT32: (-1, INT32[0], INT32[1]),
    FD.TYPE_INT64: (-1, INT64[0], INT64[1], 2**53 + 1),
    FD.TYPE_DOUBLE: (math.nan, math.inf, -math.inf, -1.0, 1e308, -0.0),
    FD.TYPE_BOOL: (True,),
}
MAPS: tuple[dict[str, Any], ...] = (
    {"\x00": "v"},
    {"k": "v" * 70_000},
    {f"k{i}": "v" for i in range(1000)},
    {"x" * 5000: "v"},
)
INT_MAPS: tuple[dict[str, int], ...] = (
    {"refund.issue": -1},
    {"noop.echo": INT32[1]},
    {"x" * 5000: 1},
    {"\x00": 1},
    {f"t{i}": 1 for i in range(1000)},
)
STRUCTS: tuple[dict[str, Any], ...] = (
    {DEEP_MARK: 101},
    {DEEP_MARK: 500},
    {"steps": "NaN"},
    {"steps": [{"text": math.nan}]},
    {"x": math.inf},
    {"steps": [{"text": "hi", "tool_calls": [{"tool": "noop.echo", "arguments": {"text": "\x00" * 1000}}]}]},
    {f"o{i}": i for i in range(2000)},
)
HEADERS: tuple[str, ...] = ("", "x" * 5000, "9" * 30, "-1", str(2**63), "\x00")
SKIP_FIELDS = frozenset({"agent_name", "agent"})  # swapped by the two StartRun/RunAgent baselines


def _edges(fd: FD) -> tuple[Any, ...]:
    if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
        value_type = fd.message_type.fields_by_name["value"].type
        return MAPS if value_type == FD.TYPE_STRING else INT_MAPS
    if fd.type == FD.TYPE_ENUM:
        assert fd.enum_type is not None
        top = max(v.number for v in fd.enum_type.values)
        values: tuple[Any, ...] = (top + 1, 99, -1, INT32[1])
        return tuple([v] for v in values) if fd.is_repeated else values
    if fd.type == FD.TYPE_STRING:
        values = STRINGS + (JSON_STRINGS if fd.name.endswith("_json") or fd.name == "input" else ())
        return (["", "a\x00b"], ["x" * 5000], ["a"] * 1000) if fd.is_repeated else values
    return NUMBERS.get(fd.type, ())


def _set(target: message.Message, fd: FD, value: Any) -> None:
    field = getattr(target, fd.name)
    if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
        field.clear()
        field.update(value)
    elif fd.is_repeated:
        del field[:]
        field.extend(value)
    elif fd.message_type is not None and fd.message_type.full_name == "google.protobuf.Struct":
        field.Clear()
        field.update(value)
        deepen(field)
    else:
        setattr(target, fd.name, value)


def message_cases(
    base: message.Message, *, skip: frozenset[str] = frozenset()
) -> Iterator[tuple[str, message.Message]]:
    """(field path = value, request) for every field of ``base`` and of its nested messages."""

    def walk(desc: Any, path: tuple[str, ...]) -> Iterator[tuple[str, message.Message]]:
        for fd in desc.fields:
            if not path and fd.name in skip:
                continue
            is_map = fd.message_type is not None and fd.message_type.GetOptions().map_entry
            struct = fd.message_type is not None and fd.message_type.full_name == "google.protobuf.Struct"
            if fd.message_type is not None and not is_map and not struct and not fd.is_repeated:
                yield from walk(fd.message_type, (*path, fd.name))
                continue
            for value in STRUCTS if struct else _edges(fd):
                request = type(base)()
                request.CopyFrom(base)
                target: message.Message = request
                for name in path:
                    target = getattr(target, name)
                _set(target, fd, value)
                yield f"{'.'.join((*path, fd.name))} = {_short(value)}", request

    yield from walk(base.DESCRIPTOR, ())


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:60]}...<{len(text)} chars>"


def _inline_agent() -> run_pb2.AgentSpec:
    agent = run_pb2.AgentSpec(name="inline", instructions="be brief", tools=["noop.echo"])
    agent.model.provider = "scripted"
    agent.model.options.update({"steps": [{"text": "ok"}]})
    agent.budgets.max_model_steps = 3
    return agent


def runtime_baselines(t: Targets) -> dict[str, Callable[[], tuple[str, message.Message, frozenset[str]]]]:
    """Per sweep: (the RPC, a valid request, top-level fields not to sweep)."""
    inline = _inline_agent()
    return {
        "RunAgent": lambda: ("RunAgent", rt.RunAgentRequest(agent_name="echo-only", input="hi"), SKIP_FIELDS),
        "RunAgent/inline": lambda: (
            "RunAgent",
            rt.RunAgentRequest(agent=inline, input="hi"),
            frozenset({"agent_name"}),
        ),
        "StartRun": lambda: ("StartRun", rt.StartRunRequest(agent_name="echo-only", input="hi"), SKIP_FIELDS),
        "StartRun/inline": lambda: (
            "StartRun",
            rt.StartRunRequest(agent=inline, input="hi"),
            frozenset({"agent_name"}),
        ),
        "GetRun": lambda: ("GetRun", rt.GetRunRequest(run_id=t.approval_run), frozenset()),
        "ListRuns": lambda: (
            "ListRuns",
            rt.ListRunsRequest(page_size=10, page_token=t.page_token),
            frozenset(),
        ),
        "StreamRunEvents": lambda: (
            "StreamRunEvents",
            rt.StreamRunEventsRequest(run_id=t.approval_run),
            frozenset(),
        ),
        "CancelRun": lambda: (
            "CancelRun",
            rt.CancelRunRequest(run_id=t.fuzz_runs[0], reason="r"),
            frozenset(),
        ),
        "ResolveApproval": lambda: (
            "ResolveApproval",
            rt.ResolveApprovalRequest(
                run_id=t.approval_run,
                approval_id=t.approval_id,
                decision=run_pb2.APPROVAL_DECISION_REJECT,
                args_hash=t.args_hash,
            ),
            frozenset(),
        ),
        "ResolveOutcome": lambda: (
            "ResolveOutcome",
            rt.ResolveOutcomeRequest(
                run_id=t.approval_run,
                call_id="call_1_0",
                decision=rt.OUTCOME_DECISION_SUCCEEDED,
                result_json="{}",
            ),
            frozenset(),
        ),
        "GetPayload": lambda: (
            "GetPayload",
            rt.GetPayloadRequest(run_id=t.approval_run, payload_id="p"),
            frozenset(),
        ),
        "GetRunDiagnostics": lambda: (
            "GetRunDiagnostics",
            rt.GetRunDiagnosticsRequest(run_id=t.approval_run),
            frozenset(),
        ),
    }


def host_cases(rpc: str) -> Iterator[tuple[str, HostCall]]:
    """Sweeps of a tool host RPC: its request fields, then each call header, then no grant."""
    requests: dict[str, message.Message] = {
        "ListTools": th.ListToolsRequest(),
        "InvokeTool": th.InvokeToolRequest(tool="noop.echo", arguments_json='{"text": "hi"}'),
        "PreviewTool": th.PreviewToolRequest(
            tool="refund.issue", arguments_json='{"order_id": "A100", "amount": 1}'
        ),
        "GetOperation": th.GetOperationRequest(idempotency_key="sweep-key"),
        "CancelOperation": th.CancelOperationRequest(idempotency_key="sweep-key", reason="sweep"),
    }
    base = HostCall(
        request=requests[rpc],
        run_id="run-sweep",
        call_id="call_1_0",
        idempotency_key="sweep-key",
        attempt="1",
        fencing="1",
        signed=True,
    )
    counter = 0

    def keyed(call: HostCall) -> HostCall:
        # A fresh idempotency key per case: a replay of an earlier case would hide this one.
        nonlocal counter
        counter += 1
        if call.idempotency_key == "sweep-key":
            call = replace(call, idempotency_key=f"sweep-{rpc}-{counter}")
        if rpc in ("GetOperation", "CancelOperation"):  # the grant binds the header's key: send it
            asked = call.request.idempotency_key
            key = call.idempotency_key if asked == "sweep-key" else asked
            request = copy.copy(call.request)
            request.idempotency_key = key
            call = replace(call, request=request, idempotency_key=key)
        return call

    for label, request in message_cases(base.request):
        yield label, keyed(replace(base, request=request))
    for header in ("run_id", "call_id", "idempotency_key", "attempt", "fencing"):
        for value in HEADERS:
            yield (
                f"header {header} = {_short(value)}",
                keyed(replace(base, **cast(dict[str, Any], {header: value}))),
            )
    yield "no grant", keyed(replace(base, signed=False))
