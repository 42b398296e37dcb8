"""The core stays pure: no I/O libraries, no clock reads, no protobuf names (STYLE §2, §5)."""

from __future__ import annotations

import ast
from pathlib import Path

import agentrt.server.core

FORBIDDEN_IMPORTS = {
    "asyncio",
    "grpc",
    "sqlalchemy",
    "redis",
    "psycopg",
    "httpx",
    "socket",
    "time",
    "random",
    "os",
    "subprocess",
    "threading",
}


def test_core_imports_no_io_and_reads_no_clock() -> None:
    root = Path(agentrt.server.core.__file__).parent
    offenders: list[str] = []
    for path in sorted(root.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Attribute) and node.attr in {"now", "utcnow", "today"}:
                offenders.append(f"{path.name}: reads the clock via .{node.attr}")
                continue
            else:
                continue
            offenders += [f"{path.name}: imports {n}" for n in names if n.split(".")[0] in FORBIDDEN_IMPORTS]
    assert offenders == []


# The wire's enum prefixes: the store's event codec and the API add and remove them, never the core.
PROTO_NAMES = ("RUN_PHASE_", "TOOL_ERROR_CODE_", "APPROVAL_DECISION_", "OUTCOME_DECISION_", "STEP_KIND_")


def test_core_carries_no_protobuf_names() -> None:
    root = Path(agentrt.server.core.__file__).parent
    offenders: list[str] = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        offenders += [f"{path.name}: {name}" for name in PROTO_NAMES if name in text]
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or "", *(a.name for a in node.names)]
            else:
                continue
            offenders += [
                f"{path.name}: imports {n}"
                for n in names
                if n.endswith("_pb2")
                or n.endswith("_pb2_grpc")
                or n.split(".")[0] == "google"
                or n.startswith("agentrt.proto")
            ]
    assert offenders == []


def test_deadline_math() -> None:
    from agentrt.server.core import backoff_delay_s, call_timeout_s, retry_fits

    assert call_timeout_s(now_s=0, run_deadline_s=10, call_timeout_s=30, reserve_s=1) == 9
    assert call_timeout_s(now_s=0, run_deadline_s=100, call_timeout_s=30, reserve_s=1) == 30
    assert call_timeout_s(now_s=20, run_deadline_s=10, call_timeout_s=30, reserve_s=1) == 0
    assert backoff_delay_s(attempt=1, base_s=0.2, cap_s=5, rand=0.5) == 0.1
    assert backoff_delay_s(attempt=10, base_s=0.2, cap_s=5, rand=0.999) < 5
    assert retry_fits(now_s=0, delay_s=1, expected_call_s=1, deadline_s=3)
    assert not retry_fits(now_s=0, delay_s=1, expected_call_s=2, deadline_s=3)
