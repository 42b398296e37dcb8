"""/metrics over real HTTP from a runtime and its tool host, after a scenario with every fault counted.

One runtime (the "owner") and one tool host on PostgreSQL live through, in order: a lost lease
(the owner freezes before a refund, a second replica takes the run over, the owner wakes and is
fenced), a tool retry that runs out, a tool attempt cut by the run's deadline, a model call that
times out and is asked again, a cancel, and a refund asked twice that the host deduplicates.
Then both endpoints are scraped and each counter is checked against what the scenario did.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentrt.client import Client, event_type
from agentrt.plugins.demo_tools import count_refunds
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.server.telemetry import COUNTER_NAMES
from agentrt.testing import (
    FakeModelServer,
    FakeResponse,
    MetricSamples,
    RecordedRequest,
    RuntimeProcess,
    ToolHostProcess,
    spawn_tool_host,
)
from tests.e2e.conftest import agent_toml, toml_value
from tests.fault.conftest import first_turn_calls

pytestmark = pytest.mark.postgres

API_KEY = "metrics-test-key-not-secret"


def refund(order_id: str, amount: float) -> dict[str, Any]:
    return {"tool": "refund.issue", "arguments": {"order_id": order_id, "amount": amount, "reason": "broken"}}


AGENTS: dict[str, tuple[list[dict[str, Any]], list[str], dict[str, Any]]] = {
    # The owner freezes right before sending this refund (the first tool send of the process).
    "lease": (
        [{"text": "refunding", "tool_calls": [refund("A102", 10.0)]}, {"text": "Refunded."}],
        ["refund.issue"],
        {},
    ),
    # Always TRANSIENT; tool_attempts = 2: one retry, then exhausted.
    "flaky": (
        [
            {"text": "trying", "tool_calls": [{"tool": "flaky.transient", "arguments": {}}]},
            {"text": "gave up"},
        ],
        ["flaky.transient"],
        {},
    ),
    # A 30 s sleep in a 2 s run: the attempt's own time runs out with the run's.
    "napper": (
        [{"text": "napping", "tool_calls": [{"tool": "sleep.wait", "arguments": {"seconds": 30}}]}],
        ["sleep.wait"],
        {"timeout_s": 2},
    ),
    # Cancelled while its sleep runs.
    "sleeper": (
        [{"text": "sleeping", "tool_calls": [{"tool": "sleep.wait", "arguments": {"seconds": 30}}]}],
        ["sleep.wait"],
        {},
    ),
    # The same refund in two steps: the host answers the second from the first (intent dedup).
    "twice": (
        [
            {"text": "refunding", "tool_calls": [refund("A100", 12.5)]},
            {"text": "again, to be sure", "tool_calls": [refund("A100", 12.5)]},
            {"text": "Refunded 12.50 for A100."},
        ],
        ["refund.issue"],
        {},
    ),
}


def write_config(tmp_path: Path, *, db_url: str, host: str, model_url: str) -> Path:
    text = (
        f'db_url = "{db_url}"\nlease_ttl_s = 1.0\npoll_interval_s = 0.1\ngrace_s = 0.5\n'
        "tool_attempts = 2\nretry_base_s = 0.05\nretry_cap_s = 0.1\nmodel_timeout_s = 1.0\n"
        f'[[tool_hosts]]\nname = "local"\naddress = "{host}"\n'
    )
    for name, (steps, tools, budgets) in AGENTS.items():
        text += agent_toml(name, steps=steps, tools=tools, budgets={"timeout_s": 60, **budgets})
    # The model-timeout agent talks to a real HTTP fake: its first request hangs.
    options = {"base_url": model_url, "api_key_env": "METRICS_FAKE_KEY"}
    text += (
        '[agents."slow-model"]\ninstructions = "test agent"\ntools = []\n'
        f'model = {{ provider = "openai", name = "gpt-test", options = {toml_value(options)} }}\n'
        "budgets = { timeout_s = 60 }\n"
    )
    path = tmp_path / "metrics.toml"
    path.write_text(text)
    return path


@pytest.fixture
def slow_model() -> Iterator[tuple[FakeModelServer, str]]:
    def respond(request: RecordedRequest) -> FakeResponse:
        return first_turn_calls(request.json(), None)

    with FakeModelServer(default=respond) as server:
        server.enqueue(FakeResponse(hang=True))  # the first call times out; the retry is answered
        yield server, f"{server.url}/v1"


@pytest.fixture
def metered_host(tmp_path: Path) -> Iterator[ToolHostProcess]:
    with spawn_tool_host(
        tmp_path / "toolhost",
        plugins=["agentrt.plugins.demo_tools", "agentrt.plugins.fault_tools"],
        extra_args=["--metrics-listen", "127.0.0.1:0"],
    ) as host:
        yield host


def start(tmp_path: Path, config: Path, *, fault: str = "") -> RuntimeProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTRT_", "OTEL_"))}
    env["METRICS_FAKE_KEY"] = API_KEY
    if fault:
        env["AGENTRT_FAULT_POINT"] = fault
    runtime = RuntimeProcess(["--config", str(config), "--listen", "127.0.0.1:0"], cwd=tmp_path, env=env)
    runtime.wait_ready(60)
    return runtime


def run_to_end(address: str, agent: str, text: str = "go") -> list[run_pb2.RunEvent]:
    with Client(address) as client:
        run_id = client.start_run(agent, text).run_id
        events = [e for e in client.stream_events(run_id, follow=True, timeout=60) if e.seq]
    assert events and event_type(events[-1]) == "run.ended", [event_type(e) for e in events]
    return events


def poll(check: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def lose_the_lease(tmp_path: Path, config: Path, owner: RuntimeProcess, host: ToolHostProcess) -> None:
    with Client(owner.address) as client:
        run_id = client.start_run("lease", "refund A102").run_id
    poll(lambda: "stopping" in owner.stderr_text(), "the owner never froze")
    replica = start(tmp_path, config)
    try:
        with Client(replica.address) as client:
            events = [e for e in client.stream_events(run_id, follow=True, timeout=60) if e.seq]
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
        os.kill(owner.process.pid, signal.SIGCONT)  # it sends the refund with its old fencing token
        poll(lambda: "lease lost" in owner.stderr_text().lower(), "the owner never learned it lost")
    finally:
        replica.close()
    assert count_refunds(host.data_dir / "refunds.sqlite") == 1


def test_metrics_of_the_runtime_and_the_tool_host_count_what_happened(
    tmp_path: Path, pg_url: str, metered_host: ToolHostProcess, slow_model: tuple[FakeModelServer, str]
) -> None:
    config = write_config(tmp_path, db_url=pg_url, host=metered_host.address, model_url=slow_model[1])
    owner = start(tmp_path, config, fault="tool_before_send@1=stop")
    try:
        lose_the_lease(tmp_path, config, owner, metered_host)
        flaky = run_to_end(owner.address, "flaky")
        napper = run_to_end(owner.address, "napper")
        slow = run_to_end(owner.address, "slow-model")
        with Client(owner.address) as client:
            run_id = client.start_run("sleeper", "sleep").run_id
            for event in client.stream_events(run_id, follow=True, timeout=30):
                if event_type(event) == "tool.started":
                    break
            client.cancel_run(run_id, reason="metrics test")
            cancelled = [e for e in client.stream_events(run_id, follow=True, timeout=30) if e.seq]
        twice = run_to_end(owner.address, "twice")
        scraped = owner.metrics()
        host_scraped = metered_host.metrics()
    finally:
        owner.close()

    assert flaky[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
    naps = [e.tool_failed for e in napper if e.HasField("tool_failed")]
    assert len(naps) == 1 and naps[0].error.message.startswith("timeout")  # the host stopped it
    assert slow[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
    assert cancelled[-1].run_ended.phase == run_pb2.RUN_PHASE_CANCELLED
    assert twice[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
    check_runtime(scraped)
    check_host(host_scraped)


def check_runtime(scraped: MetricSamples) -> None:
    counters = scraped.counters()
    expected = dict.fromkeys(COUNTER_NAMES, 0) | {
        "runs_started": 6,
        "runs_ended": 5,  # the lease run ended on the replica
        "lease_lost_count": 1,
        "retry_count": 2,  # the flaky tool's one retry and the timed-out model call's
        "retry_exhausted_count": 2,  # the flaky tool out of attempts, the nap out of time
        "timeout_count": 2,  # the nap the host stopped at its deadline and the hung model call
        "cancel_requested_count": 1,
        "partial_run_count": 1,  # the cancelled sleeper had started its call
        "duplicate_suppressed_count": 1,
    }
    assert counters["steps"] > 0
    assert {name: counters[name] for name in COUNTER_NAMES if name != "steps"} == {
        name: value for name, value in expected.items() if name != "steps"
    }
    assert set(counters) <= set(COUNTER_NAMES)
    # Where they happened: bounded attributes name the tool, the model and the agent.
    assert scraped.value("agentrt_retry_count_total", tool="flaky.transient", agent="flaky") == 1
    assert scraped.value("agentrt_retry_count_total", provider="openai", model="gpt-test") == 1
    assert scraped.value("agentrt_retry_exhausted_count_total", tool="sleep.wait", agent="napper") == 1
    assert scraped.value("agentrt_timeout_count_total", tool="sleep.wait", agent="napper") == 1
    assert scraped.value("agentrt_timeout_count_total", model="gpt-test", agent="slow-model") == 1
    assert scraped.value("agentrt_cancel_requested_count_total", tenant="default") == 1
    assert scraped.value("agentrt_duplicate_suppressed_count_total", tool="refund.issue", agent="twice") == 1
    # Never a run id in a label; only the bounded attributes.
    labels = {key for _, got, _ in scraped.samples for key in got}
    assert "run_id" not in labels and "call_id" not in labels
    # Histograms: GenAI semconv names, tool latency by outcome, commits, steps, queue waits.
    assert scraped.value("gen_ai_client_operation_duration_seconds_count", gen_ai_operation_name="chat") >= 6
    assert scraped.value("gen_ai_client_operation_duration_seconds_count", error_type="timeout") == 1
    assert scraped.value("gen_ai_client_token_usage_count", gen_ai_token_type="input") >= 5
    assert (
        scraped.value("agentrt_tool_call_duration_seconds_count", tool="flaky.transient", outcome="transient")
        == 2
    )
    assert scraped.value("agentrt_commit_duration_seconds_count") > 0
    assert scraped.value("agentrt_step_duration_seconds_count", kind="tool") >= 4
    assert scraped.value("agentrt_run_queue_wait_duration_seconds_count") >= 5
    for gauge in ("agentrt_queue_depth", "agentrt_leases_owned", "agentrt_streams_followers"):
        assert gauge in scraped.names(), gauge


def check_host(scraped: MetricSamples) -> None:
    def events(name: str) -> float:
        return scraped.value("agentrt_toolhost_events_total", event=name)

    # lease: the replica's refund and the owner's fenced one; flaky: 2; nap: 1; sleeper: 1;
    # twice: 2 (the second answered from the first).
    assert events("invocations") == 8
    assert events("fenced") == 1
    assert events("failed_transient") == 3 and events("timeout") == 1  # flaky twice, the nap once
    assert events("duplicate_suppressed") == 1 and events("intent_duplicate") == 1
    assert events("succeeded") == 2  # the two refunds that ran
    labels = {key for _, got, _ in scraped.samples for key in got}
    assert labels <= {"event", "otel_scope_name", "otel_scope_schema_url", "otel_scope_version"} | {
        "service_name",
        "service_instance_id",
        "telemetry_sdk_language",
        "telemetry_sdk_name",
        "telemetry_sdk_version",
        "service_namespace",
        "host_name",
    }
