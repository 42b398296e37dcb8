"""Tool host down or frozen, retries against the deadline, expired queued runs, manual settling."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentrt.client import Client, RPCError, cli, event_type
from agentrt.plugins.demo_tools import count_refunds
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import RuntimeProcess, ToolHostProcess, start_tool_host
from tests.fault.conftest import REFUND_SCRIPT, free_port, runtime_env, serve_fake_openai, start_runtime

PLUGINS = ["agentrt.plugins.demo_tools", "agentrt.plugins.fault_tools"]
LOOKUP_THEN_DONE = {1: REFUND_SCRIPT[1], 2: {"text": "looked it up"}}
REFUND_AT_ONCE = {1: REFUND_SCRIPT[2], 2: {"text": "refunded"}}


@contextlib.contextmanager
def scenario(
    tmp_path: Path, script: dict[int, dict[str, Any]], **settings: Any
) -> Iterator[tuple[ToolHostProcess, RuntimeProcess]]:
    """A tool host, a fake model playing ``script`` and a runtime with ``settings``; always cleaned up."""
    host = start_tool_host(tmp_path / "host", plugins=PLUGINS)
    with serve_fake_openai(script) as (_, model_url):
        env = runtime_env(
            db_url=f"sqlite:///{tmp_path / 'rt.sqlite'}",
            tool_host=host.address,
            model_url=model_url,
            **settings,
        )
        runtime = start_runtime(tmp_path, env)
        try:
            yield host, runtime
        finally:
            if host.process.poll() is None:
                os.kill(host.pid, signal.SIGCONT)  # a test may have frozen it
            runtime.close()
            host.stop()


def persisted(address: str, run_id: str, timeout: float = 60.0) -> list[run_pb2.RunEvent]:
    with Client(address) as client:
        return [e for e in client.stream_events(run_id, follow=True, timeout=timeout) if e.seq]


def wait_phase(address: str, run_id: str, phase: int, timeout: float = 30.0) -> run_pb2.Run:
    deadline = time.monotonic() + timeout
    with Client(address) as client:
        while True:
            run = client.get_run(run_id)
            if run.phase == phase:
                return run
            assert time.monotonic() < deadline, f"run stayed {run_pb2.RunPhase.Name(run.phase)}"
            time.sleep(0.05)


def stopped_counters(runtime: RuntimeProcess) -> dict[str, int]:
    """The counters, scraped while the process serves, then a graceful stop."""
    counters = runtime.counters()
    runtime.stop()
    return counters


def test_tool_host_down_at_call_time_is_retried_until_it_is_back(tmp_path: Path) -> None:
    port = free_port()
    host = start_tool_host(tmp_path / "host", plugins=PLUGINS, listen=f"127.0.0.1:{port}")
    with serve_fake_openai(LOOKUP_THEN_DONE) as (_, model_url):
        env = runtime_env(
            db_url=f"sqlite:///{tmp_path / 'rt.sqlite'}",
            tool_host=host.address,
            model_url=model_url,
            tool_attempts=30,
            retry_base_s=0.2,
            retry_cap_s=0.4,
        )
        runtime = start_runtime(tmp_path, env)
        try:
            host.stop()  # the runtime learned the tools; now the host is gone
            with Client(runtime.address) as client:
                run_id = client.start_run("refund", "look up A100").run_id
            wait_for_type(runtime.address, run_id, "retry.scheduled")
            host = start_tool_host(tmp_path / "host", plugins=PLUGINS, listen=f"127.0.0.1:{port}")
            events = persisted(runtime.address, run_id)
            assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
            types = [event_type(e) for e in events]
            assert "tool.completed" in types and "tool.failed" not in types
            retries = [e.retry_scheduled for e in events if e.HasField("retry_scheduled")]
            assert retries and "UNAVAILABLE" in retries[0].reason
            started = [e.tool_started for e in events if e.HasField("tool_started")]
            assert [s.attempt for s in started] == list(range(1, len(started) + 1))
            assert len({s.idempotency_key for s in started}) == 1
            counters = stopped_counters(runtime)
            assert counters["retry_count"] == len(retries) and counters["retry_exhausted_count"] == 0
        finally:
            runtime.close()
            host.stop()


def wait_for_type(address: str, run_id: str, wanted: str, timeout: float = 30.0) -> None:
    with Client(address) as client:
        for event in client.stream_events(run_id, follow=True, timeout=timeout):
            if event_type(event) == wanted:
                return
    raise AssertionError(f"no {wanted}")


def test_a_frozen_tool_host_ends_the_write_in_unknown_outcome_until_a_query_answers(tmp_path: Path) -> None:
    with scenario(tmp_path, REFUND_AT_ONCE, timeout_s=3, query_timeout_s=0.5) as (host, runtime):
        os.kill(host.pid, signal.SIGSTOP)
        begun = time.time()
        with Client(runtime.address) as client:
            run_id = client.start_run("refund", "refund A100").run_id
        unknown = wait_phase(runtime.address, run_id, run_pb2.RUN_PHASE_UNKNOWN_OUTCOME)
        # The call got the run's deadline (3 s less the reserve), then one bounded query.
        assert time.time() - begun < 3 + 0.5 + 2
        assert unknown.reason == "" and count_refunds_safe(host.data_dir) == 0
        os.kill(host.pid, signal.SIGCONT)
        events = persisted(runtime.address, run_id)
        types = [event_type(e) for e in events]
        assert "tool.outcome.unknown" in types
        ended = events[-1].run_ended
        # UNKNOWN_OUTCOME is never collapsed into FAILED; once settled, the passed deadline ends it.
        assert ended.phase == run_pb2.RUN_PHASE_EXPIRED and ended.partial
        refunds = count_refunds_safe(host.data_dir)
        assert refunds == (1 if "tool.completed" in types else 0)
        counters = stopped_counters(runtime)
        assert counters["timeout_count"] >= 1 and counters["unknown_result_count"] >= 1


def count_refunds_safe(data_dir: Path) -> int:
    path = data_dir / "refunds.sqlite"
    return count_refunds(path) if path.exists() else 0


@pytest.mark.parametrize("timeout_s, retried", [(1.8, False), (30, True)])
def test_a_retry_is_scheduled_only_if_it_fits_the_deadline(
    tmp_path: Path, timeout_s: float, retried: bool
) -> None:
    script = {1: {"tool": "flaky.transient", "arguments": {"delay_s": 1.0}}, 2: {"text": "gave up"}}
    with scenario(tmp_path, script, timeout_s=timeout_s, retry_base_s=0.05, retry_cap_s=0.1) as (
        _,
        runtime,
    ):
        with Client(runtime.address) as client:
            run_id = client.start_run("refund", "try").run_id
        events = persisted(runtime.address, run_id)
        retries = [e for e in events if e.HasField("retry_scheduled")]
        failed = [e.tool_failed for e in events if e.HasField("tool_failed")]
        assert len(failed) == 1 and failed[0].error.code == 3  # TOOL_ERROR_CODE_TRANSIENT
        counters = stopped_counters(runtime)
        assert counters["retry_exhausted_count"] == 1
        if retried:
            assert len(retries) == 2 and counters["retry_count"] == 2  # 3 attempts in all
        else:
            # 1 s attempt + backoff + another 1 s attempt cannot end before a 1.8 s deadline.
            assert retries == [] and counters["retry_count"] == 0


def test_a_queued_run_that_expired_before_a_worker_took_it_ends_expired(tmp_path: Path) -> None:
    script = {1: {"tool": "sleep.wait", "arguments": {"seconds": 30}}}
    with scenario(tmp_path, script, max_concurrent_runs=1) as (_, runtime):
        with Client(runtime.address) as client:
            busy = client.start_run("refund", "occupy the only worker slot").run_id
            wait_for_type(runtime.address, busy, "tool.started")
            budgets = run_pb2.Budgets()
            budgets.timeout.FromMilliseconds(500)
            queued = client.start_run("refund", "too late", budgets=budgets)
            assert queued.phase == run_pb2.RUN_PHASE_QUEUED
            time.sleep(0.8)  # the queued run's whole budget passes with no worker free
            client.cancel_run(busy, reason="free the slot")
        events = persisted(runtime.address, queued.run_id)
        assert [event_type(e) for e in events] == ["run.started", "run.ended"]
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_EXPIRED
        assert events[-1].run_ended.reason == "deadline_exceeded"
        assert stopped_counters(runtime)["cancel_requested_count"] == 1


def test_a_person_settles_an_unknown_outcome_and_bad_decisions_change_nothing(tmp_path: Path) -> None:
    with scenario(tmp_path, REFUND_AT_ONCE, timeout_s=2, query_timeout_s=0.3) as (host, runtime):
        os.kill(host.pid, signal.SIGSTOP)
        with Client(runtime.address) as client:
            run_id = client.start_run("refund", "refund A100").run_id
            run = wait_phase(runtime.address, run_id, run_pb2.RUN_PHASE_UNKNOWN_OUTCOME)
            call_id = "call_1"
            bad = [
                (
                    lambda: client.resolve_outcome(
                        run_id, "call_9", decision="failed", expected_revision=run.revision
                    ),
                    "UNKNOWN_CALL",
                ),
                (
                    lambda: client.resolve_outcome(
                        run_id, call_id, decision="failed", expected_revision=run.revision - 1
                    ),
                    "STALE_REVISION",
                ),
                (
                    lambda: client.resolve_outcome(
                        run_id,
                        call_id,
                        decision="succeeded",
                        result_json="{nope",
                        expected_revision=run.revision,
                    ),
                    "INVALID_REQUEST",
                ),
                (
                    lambda: client.resolve_outcome(
                        "no-such-run", call_id, decision="failed", expected_revision=1
                    ),
                    "RUN_NOT_FOUND",
                ),
            ]
            for call, reason in bad:
                with pytest.raises(RPCError) as info:
                    call()
                assert info.value.reason == reason
                assert client.get_run(run_id).revision == run.revision
            # A person settles it from the CLI.
            args = ["--target", runtime.address, "resolve", run_id, call_id, "failed"]
            assert cli.main([*args, "--revision", str(run.revision), "--comment", "checked the bank"]) == 0
        events = persisted(runtime.address, run_id)
        failed = [e.tool_failed for e in events if e.HasField("tool_failed")]
        assert failed and "decided by a person" in failed[0].error.message
        # Settled after the run's 2 s deadline: the next decision ends it EXPIRED, nothing re-sent.
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_EXPIRED
        assert sum(1 for e in events if e.HasField("tool_started")) == 1
        with Client(runtime.address) as client, pytest.raises(RPCError) as info:
            client.resolve_outcome(run_id, call_id, decision="failed", expected_revision=events[-1].seq)
        assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION
