"""The tool host dies after a write's effect and before its reply: the effect still counts once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agentrt.client import Client, event_type
from agentrt.plugins.demo_tools import count_refunds
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import start_tool_host
from agentrt.toolhost._faults import FAULT_ENV, FAULT_EXIT_CODE
from tests.fault.conftest import REFUND_SCRIPT, free_port, runtime_env, serve_fake_openai, start_runtime

PLUGINS = ["agentrt.plugins.demo_tools", "agentrt.plugins.fault_tools"]


def test_host_crash_after_the_effect_is_settled_from_the_tools_own_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    monkeypatch.setenv(FAULT_ENV, "after_effect:refund.issue")
    host = start_tool_host(tmp_path / "host", plugins=PLUGINS, listen=f"127.0.0.1:{port}")
    monkeypatch.delenv(FAULT_ENV)
    with serve_fake_openai(REFUND_SCRIPT) as (_, model_url):
        env = runtime_env(
            db_url=f"sqlite:///{tmp_path / 'rt.sqlite'}",
            tool_host=host.address,
            model_url=model_url,
            query_timeout_s=0.5,
        )
        runtime = start_runtime(tmp_path, env)
        try:
            with Client(runtime.address) as client:
                run_id = client.start_run("refund", "refund A100").run_id
                assert host.wait(30) == FAULT_EXIT_CODE  # the refund landed, then the host died
                assert count_refunds(host.data_dir / "refunds.sqlite") == 1
                deadline = time.monotonic() + 30
                while client.get_run(run_id).phase != run_pb2.RUN_PHASE_UNKNOWN_OUTCOME:
                    assert time.monotonic() < deadline
                    time.sleep(0.05)
            host.stop()  # releases the dead child's pipes
            host = start_tool_host(tmp_path / "host", plugins=PLUGINS, listen=f"127.0.0.1:{port}")
            with Client(runtime.address) as client:
                events = [e for e in client.stream_events(run_id, follow=True, timeout=60) if e.seq]
            types = [event_type(e) for e in events]
            assert "tool.outcome.unknown" in types
            assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
            settled = [
                e.tool_completed
                for e in events
                if e.HasField("tool_completed") and e.tool_completed.tool == "refund.issue"
            ]
            assert (
                len(settled) == 1 and settled[0].replayed and '"status": "issued"' in settled[0].result_json
            )
            assert count_refunds(host.data_dir / "refunds.sqlite") == 1
            counters = runtime.counters()  # scraped while it serves
            runtime.stop()
            assert counters["unknown_result_count"] >= 1 and counters["duplicate_suppressed_count"] == 1
        finally:
            runtime.close()
            host.stop()
