"""Bytes that are not the request message, sent to every method of both services.

A request that cannot be parsed is the client's error: INVALID_ARGUMENT (or UNAUTHENTICATED
when the call carries no credential), never INTERNAL or UNKNOWN, and it changes nothing.
"""

from __future__ import annotations

import functools

import grpc
import pytest
from google.protobuf import message

from agentrt.proto.runtime.v1 import runtime_service_pb2 as rt
from agentrt.proto.toolhost.v1 import tool_host_service_pb2 as th
from tests.fuzz.findings import report
from tests.fuzz.harness import HOST_RPCS, RUNTIME_RPCS, FuzzStack

GARBAGE: dict[str, bytes] = {
    "all 0xff": b"\xff" * 16,
    "field number 0": b"\x00\x01",
    "truncated varint": b"\x10\xff\xff\xff",
    "length past the end": b"\x0a\xff\xff\xff\xff\x0f",
    "invalid UTF-8 in field 1": b"\x0a\x02\xff\xfe",
    "invalid UTF-8 in field 2": b"\x12\x03\xc3\x28\xa0",
    "unterminated group": b"\x0b" * 64,
    "nested past the depth limit": b"\x12" + b"\x02\x12" * 200,
    "end group without start": b"\x0c",
    "random": bytes(range(256)),
}
UNAUTHENTICATED_OK = frozenset({grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNAUTHENTICATED})


def request_type(rpc: str) -> type[message.Message]:
    module = th if rpc in HOST_RPCS else rt
    found: type[message.Message] = getattr(module, f"{rpc}Request")
    return found


def parses(rpc: str, data: bytes) -> bool:
    try:
        request_type(rpc).FromString(data)
    except message.DecodeError:
        return False
    return True


CALLERS = [
    *((rpc, who) for rpc in RUNTIME_RPCS for who in ("fuzz", None)),
    # The tool host's caller is identified by its mTLS certificate, which this channel presents.
    *((rpc, "fuzz") for rpc in HOST_RPCS),
]


@pytest.mark.parametrize(("rpc", "who"), CALLERS, ids=[f"{r}-{w or 'no credential'}" for r, w in CALLERS])
def test_unparseable_requests_are_invalid_argument(stack: FuzzStack, rpc: str, who: str | None) -> None:
    failures = []
    for name, data in GARBAGE.items():
        problems = stack.run_example(
            rpc, f"<{name}>", send=functools.partial(stack.call_raw, rpc, data, who=who)
        )
        outcome = stack.last
        assert outcome is not None
        if not parses(rpc, data):
            allowed = (
                UNAUTHENTICATED_OK if who is None or rpc in HOST_RPCS else {grpc.StatusCode.INVALID_ARGUMENT}
            )
            if outcome.code not in allowed:
                problems.append(
                    f"unparseable request answered {outcome.code.name}, not {sorted(c.name for c in allowed)}"
                )
        if problems:
            failures.append(f"[{name}] {outcome.code.name}: " + "; ".join(problems))
    assert not failures, "\n".join(failures) + (
        "\n" + report(stack.tally.findings[-1]) if stack.tally.findings else ""
    )
