"""What operators and newcomers do first: grpcurl against a live server, and `agentrt demo`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agentrt.testing import spawn_runtime, spawn_tool_host

BIN = Path(sys.executable).parent
GRPCURL = str(BIN / "grpcurl")


def grpcurl(*args: str) -> str:
    done = subprocess.run([GRPCURL, "-plaintext", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_grpcurl_lists_both_services_and_streams_a_demo_run(tmp_path: Path) -> None:
    with spawn_runtime(["--demo", "--listen", "127.0.0.1:0"], cwd=tmp_path) as runtime:
        services = grpcurl(runtime.address, "list").split()
        assert {"agentrt.runtime.v1.AgentRuntimeService", "grpc.health.v1.Health"} <= set(services)
        described = grpcurl(runtime.address, "describe", "agentrt.runtime.v1.AgentRuntimeService")
        assert "rpc RunAgent" in described and "stream .agentrt.runtime.v1.RunAgentResponse" in described
        health = json.loads(grpcurl(runtime.address, "grpc.health.v1.Health/Check"))
        assert health["status"] == "SERVING"
        out = grpcurl(
            "-d",
            '{"agent_name": "refund-demo", "input": "refund A100"}',
            runtime.address,
            "agentrt.runtime.v1.AgentRuntimeService/RunAgent",
        )
        events = [json.loads(chunk)["event"] for chunk in _json_objects(out)]
        persisted = [e for e in events if int(e.get("seq", 0))]
        assert [int(e["seq"]) for e in persisted] == list(range(1, len(persisted) + 1))
        # The refund is over the demo policy's limit: RunAgent ends where the run pauses.
        pending = persisted[-1]["approval_requested"]
        run_id = persisted[0]["run_id"]
        run = json.loads(
            grpcurl(
                "-d",
                json.dumps({"run_id": run_id}),
                runtime.address,
                "agentrt.runtime.v1.AgentRuntimeService/GetRun",
            )
        )["run"]
        assert run["phase"] == "RUN_PHASE_WAITING_APPROVAL"
        # The README's "why is this run stuck" line: parked for a person, held by no replica.
        diagnostics = json.loads(
            grpcurl(
                "-d",
                json.dumps({"run_id": run_id}),
                runtime.address,
                "agentrt.runtime.v1.AgentRuntimeService/GetRunDiagnostics",
            )
        )["diagnostics"]
        assert diagnostics["phase"] == "RUN_PHASE_WAITING_APPROVAL" and "lease_owner" not in diagnostics
        (waiting,) = diagnostics["pending_calls"]
        assert (waiting["tool"], waiting["state"]) == ("refund.issue", "PENDING_CALL_STATE_WAITING_APPROVAL")
        assert "wake_time" in diagnostics  # the approval's expiry wakes it
        assert diagnostics["waiting"]["reason"] == "WAIT_REASON_APPROVAL"
        assert diagnostics["waiting"]["detail"] == pending["approval_id"]
        approve = {
            "run_id": run_id,
            "approval_id": pending["approval_id"],
            "decision": "APPROVAL_DECISION_APPROVE",
            "args_hash": pending["args_hash"],
            "expected_revision": run["revision"],
        }
        grpcurl(
            "-d",
            json.dumps(approve),
            runtime.address,
            "agentrt.runtime.v1.AgentRuntimeService/ResolveApproval",
        )
        rest = grpcurl(
            "-d",
            json.dumps({"run_id": run_id, "after_seq": len(persisted), "follow": True}),
            runtime.address,
            "agentrt.runtime.v1.AgentRuntimeService/StreamRunEvents",
        )
        tail = [json.loads(c)["event"] for c in _json_objects(rest)]
        tail = [e for e in tail if int(e.get("seq", 0))]
        assert int(tail[0]["seq"]) == len(persisted) + 1
        assert tail[-1]["run_ended"]["phase"] == "RUN_PHASE_COMPLETED"
        replay = grpcurl(
            "-d",
            json.dumps({"run_id": run_id, "after_seq": 10}),
            runtime.address,
            "agentrt.runtime.v1.AgentRuntimeService/StreamRunEvents",
        )
        assert [int(json.loads(c)["event"]["seq"]) for c in _json_objects(replay)] == list(
            range(11, int(tail[-1]["seq"]) + 1)
        )
    with spawn_tool_host(tmp_path / "host", plugins=["agentrt.plugins.demo_tools"]) as host:
        services = grpcurl(host.address, "list").split()
        assert "agentrt.toolhost.v1.ToolHostService" in services
        tools = json.loads(grpcurl(host.address, "agentrt.toolhost.v1.ToolHostService/ListTools"))
        assert "refund.issue" in {t["name"] for t in tools["tools"]}


def _json_objects(text: str) -> list[str]:
    """grpcurl prints one pretty JSON object per streamed message."""
    decoder = json.JSONDecoder()
    objects, index = [], 0
    while index < len(text):
        if text[index].isspace():
            index += 1
            continue
        _, end = decoder.raw_decode(text, index)
        objects.append(text[index:end])
        index = end
    return objects


def test_agentrt_demo_runs_the_refund_agent_end_to_end(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    done = subprocess.run(
        [str(BIN / "agentrt"), "demo"], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for expected in ("run.started", "tool.completed", "refund.issue", "run.ended", "COMPLETED"):
        assert expected in done.stdout, done.stdout
    assert (tmp_path / ".agentrt" / "demo.sqlite").exists()
