"""What one fuzz call answered, what it may have changed, and how a broken invariant is reported."""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import json_format

from tests.fuzz.strategies import HostCall

BROKEN = frozenset({grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN})
# Statuses that say "refused": such a call must have changed nothing. DEADLINE_EXCEEDED and
# CANCELLED are not among them: a stream the client stopped reading may well have started a run.
REJECTED = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)


@dataclass(frozen=True)
class Outcome:
    """What one call answered: its status, a clipped message, and how many stream items came."""

    rpc: str
    code: grpc.StatusCode
    message: str
    items: int

    @property
    def rejected(self) -> bool:
        return self.code in REJECTED and self.items == 0


@dataclass(frozen=True)
class Snapshot:
    runs: tuple[tuple[Any, ...], ...]
    payloads: int
    operations: tuple[tuple[Any, ...], ...]
    fences: tuple[tuple[Any, ...], ...]
    others: tuple[tuple[Any, ...], ...]  # every other tenant's runs: no fuzz call may touch them


@dataclass
class Finding:
    """One example that broke an invariant."""

    rpc: str
    code: str
    problems: list[str]
    request: str
    server_log: list[str]


@dataclass
class Tally:
    """Examples run per RPC, a histogram of status codes, and the findings."""

    examples: collections.Counter[str] = field(default_factory=collections.Counter)
    codes: collections.Counter[str] = field(default_factory=collections.Counter)
    by_rpc: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    findings: list[Finding] = field(default_factory=list)

    @property
    def broken(self) -> int:
        return sum(n for code, n in self.codes.items() if code in {c.name for c in BROKEN})


def clip(value: Any, limit: int = 80) -> Any:
    """``value`` with every long string cut, so a report never prints a megabyte of input."""
    if isinstance(value, str):
        return value if len(value) <= limit else f"{value[:limit]}...<{len(value)} chars>"
    if isinstance(value, dict):
        items = list(value.items())
        shown = {clip(k, 40): clip(v, limit) for k, v in items[:8]}
        if len(items) > 8:
            shown["..."] = f"<{len(items)} entries>"
        return shown
    if isinstance(value, list):
        return [clip(v, limit) for v in value[:8]] + ([f"<{len(value)} items>"] if len(value) > 8 else [])
    return value


def describe(message: Any) -> str:
    """A short, clipped rendering of a request message (or a HostCall)."""
    if isinstance(message, str):
        return str(clip(message, 200))
    if isinstance(message, HostCall):
        headers = {k: clip(v, 40) for k, v in vars(message).items() if k != "request"}
        return f"{describe(message.request)} headers={headers}"
    try:
        as_dict = json_format.MessageToDict(message, preserving_proto_field_name=True)
    except Exception as exc:  # e.g. a Duration out of range cannot be rendered as JSON
        flat = " ".join(str(message).split())
        return f"{type(message).__name__}(<unrenderable: {type(exc).__name__}>) {clip(flat, 400)}"
    return f"{type(message).__name__}({json.dumps(clip(as_dict), ensure_ascii=True)})"


def log_lines(text: str) -> list[str]:
    """The lines of new server stderr worth reporting: errors and the last line of tracebacks."""
    lines = text.splitlines()
    keep = [ln for ln in lines if "Error" in ln or "Exception" in ln or "error" in ln.lower()]
    return [clip(ln, 240) for ln in keep[-12:]]


def differences(before: Snapshot, after: Snapshot, outcome: Outcome) -> list[str]:
    what = f"{outcome.rpc} was refused ({outcome.code.name}) but"
    found = []
    if before.runs != after.runs:
        changed = sorted(set(after.runs) - set(before.runs))[:3]
        found.append(f"{what} the fuzz tenant's runs changed: {changed}")
    if before.payloads != after.payloads:
        found.append(f"{what} payload rows went {before.payloads} -> {after.payloads}")
    if before.operations != after.operations:
        found.append(
            f"{what} the ledger's operations changed"
            f" ({len(before.operations)} -> {len(after.operations)} rows)"
        )
    if before.fences != after.fences:
        found.append(f"{what} the ledger's fencing rows changed")
    return found


def report(finding: Finding) -> str:
    lines = [f"{finding.rpc} -> {finding.code}", f"  request: {finding.request}"]
    lines += [f"  problem: {p}" for p in finding.problems]
    lines += [f"  server: {ln}" for ln in finding.server_log]
    return "\n".join(lines)
