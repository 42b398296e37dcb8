"""Per-tool concurrency limits: calls past a tool's limit queue in the runtime instead of piling onto
its host (issue 9). Real runtime and tool host processes; the overlap is read from the tool's own
record of when each call started and finished, not from timings.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pydantic
import pytest

from agentrt.client import Client
from agentrt.plugins.demo_tools import SLEEP_LOG_FILE
from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2, runtime_service_pb2_grpc
from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.server.tools import SlotTimeout, ToolSlots
from agentrt.testing import RuntimeProcess, ToolHostProcess, spawn_runtime
from agentrt.toolhost import SideEffect, ToolContext, tool
from agentrt.toolhost._convert import tool_to_spec
from tests.e2e.conftest import agent_toml

NAP = [
    {"text": "napping", "tool_calls": [{"tool": "sleep.wait", "arguments": {"seconds": 0.3}}]},
    {"text": "woke"},
]
RUNS = 4
LONG_NAP = [
    {"text": "napping", "tool_calls": [{"tool": "sleep.wait", "arguments": {"seconds": 30}}]},
    {"text": "woke"},
]


def most_at_once(lines: list[str]) -> int:
    """The largest number of calls between their ``started`` and end lines.

    (Call ids repeat across runs, so this counts lines, not ids.)
    """
    running = most = 0
    for line in lines:
        running += 1 if line.startswith("started ") else -1
        most = max(most, running)
    return most


@pytest.fixture
def limited_runtime(tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str) -> Iterator[RuntimeProcess]:
    path = tmp_path / "slots.toml"
    path.write_text(
        f'db_url = "{sqlite_url}"\npoll_interval_s = 0.1\ngrace_s = 1.0\n'
        f'[[tool_hosts]]\nname = "local"\naddress = "{tool_host.address}"\n'
        '[tool_limits]\nmax_concurrent_calls = { "sleep.wait" = 1 }\n'
        + agent_toml("napper", steps=NAP, tools=["sleep.wait"], budgets={"timeout_s": 60})
        + agent_toml("long", steps=LONG_NAP, tools=["sleep.wait"], budgets={"timeout_s": 60})
        + agent_toml("hurried", steps=LONG_NAP, tools=["sleep.wait"], budgets={"timeout_s": 3})
    )
    with spawn_runtime(["--config", str(path), "--listen", "127.0.0.1:0"], cwd=tmp_path) as runtime:
        yield runtime


def test_parallel_runs_never_overlap_calls_of_a_tool_limited_to_one(
    limited_runtime: RuntimeProcess, tool_host: ToolHostProcess
) -> None:
    with grpc.insecure_channel(limited_runtime.address) as channel:
        stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channel)
        run_ids = [
            stub.StartRun(
                runtime_service_pb2.StartRunRequest(agent_name="napper", input=f"nap {n}"), timeout=20
            ).run.run_id
            for n in range(RUNS)
        ]
        end = time.monotonic() + 60
        phases: list[int] = []
        while time.monotonic() < end:
            runs = [stub.GetRun(runtime_service_pb2.GetRunRequest(run_id=r), timeout=20).run for r in run_ids]
            phases = [run.phase for run in runs]
            if all(p == run_pb2.RUN_PHASE_COMPLETED for p in phases):
                break
            time.sleep(0.1)

    assert phases == [run_pb2.RUN_PHASE_COMPLETED] * RUNS
    lines = (tool_host.data_dir / SLEEP_LOG_FILE).read_text().splitlines()
    assert sorted(line.split()[0] for line in lines) == ["finished"] * RUNS + ["started"] * RUNS
    assert most_at_once(lines) == 1, lines


def log_lines(tool_host: ToolHostProcess) -> list[str]:
    path = tool_host.data_dir / SLEEP_LOG_FILE
    return path.read_text().splitlines() if path.exists() else []


def wait_until(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, f"not {what} within {timeout}s"
        time.sleep(0.05)


class Stub:
    def __init__(self, channel: grpc.Channel) -> None:
        self.stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channel)

    def start(self, agent: str) -> str:
        request = runtime_service_pb2.StartRunRequest(agent_name=agent, input="nap")
        return str(self.stub.StartRun(request, timeout=20).run.run_id)

    def phase(self, run_id: str) -> int:
        return int(self.stub.GetRun(runtime_service_pb2.GetRunRequest(run_id=run_id), timeout=20).run.phase)

    def cancel(self, run_id: str) -> None:
        self.stub.CancelRun(runtime_service_pb2.CancelRunRequest(run_id=run_id, reason="test"), timeout=20)

    def events_text(self, run_id: str) -> str:
        request = runtime_service_pb2.StreamRunEventsRequest(run_id=run_id, follow=False)
        return "\n".join(str(item.event) for item in self.stub.StreamRunEvents(request, timeout=20))


TERMINAL = {run_pb2.RUN_PHASE_COMPLETED, run_pb2.RUN_PHASE_FAILED, run_pb2.RUN_PHASE_CANCELLED}
TERMINAL |= {run_pb2.RUN_PHASE_EXPIRED}


def test_a_call_waiting_for_a_slot_is_cancelled_or_expires_without_reaching_the_host(
    limited_runtime: RuntimeProcess, tool_host: ToolHostProcess
) -> None:
    with grpc.insecure_channel(limited_runtime.address) as channel:
        api = Stub(channel)
        holder = api.start("long")
        wait_until(lambda: log_lines(tool_host) == ["started call_1_0"], "holding the slot")

        queued = api.start("long")
        wait_until(lambda: api.phase(queued) == run_pb2.RUN_PHASE_TOOL_STEP, "queued for the slot")
        api.cancel(queued)
        wait_until(lambda: api.phase(queued) == run_pb2.RUN_PHASE_CANCELLED, "cancelled")

        # Its deadline arrives while it waits: it gives up at the deadline, never sent.
        hurried = api.start("hurried")
        wait_until(lambda: api.phase(hurried) in TERMINAL, "ended", timeout=15)
        assert api.phase(hurried) == run_pb2.RUN_PHASE_EXPIRED
        assert "no free slot of tool" in api.events_text(hurried)

        assert log_lines(tool_host) == ["started call_1_0"]  # only the holder's call reached the host
        api.cancel(holder)
        wait_until(lambda: api.phase(holder) == run_pb2.RUN_PHASE_CANCELLED, "holder cancelled")


def test_most_at_once_sees_an_overlap() -> None:
    # The measure itself must be able to fail.
    assert most_at_once(["started a", "started a", "finished a", "finished a"]) == 2
    assert most_at_once(["started a", "finished a", "started a", "finished a"]) == 1


def spec(limit: int) -> tool_pb2.ToolSpec:
    return tool_pb2.ToolSpec(name="t", max_concurrent_calls=limit)


def test_the_config_overrides_the_spec_and_the_default_applies_last() -> None:
    slots = ToolSlots(limits={"t": 3, "free": 0}, default=7)

    assert slots.limit("t", spec(1)) == 3
    assert slots.limit("free", spec(1)) == 0  # the operator lifted the tool's own limit
    assert slots.limit("other", spec(2)) == 2
    assert slots.limit("other", spec(0)) == 7
    assert slots.limit("other", None) == 7
    assert ToolSlots().limit("other", spec(0)) == 0


def test_negative_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="0 \\(none\\) or more"):
        ToolSlots(limits={"t": -1})
    with pytest.raises(ValueError, match="0 \\(none\\) or more"):
        ToolSlots(default=-1)


async def test_a_call_waits_for_a_slot_and_gives_up_at_its_deadline() -> None:
    slots = ToolSlots(limits={"t": 1})
    async with slots.hold("t", 1, timeout_s=5) as waited:
        assert waited < 5 and slots.busy("t") == 1
        with pytest.raises(SlotTimeout, match="at most 1 calls at once"):
            async with slots.hold("t", 1, timeout_s=0.05):
                pytest.fail("got a second slot of a tool limited to one")
    assert slots.busy("t") == 0
    async with slots.hold("t", 1, timeout_s=0.05):  # freed again
        assert slots.busy("t") == 1


class NoArgs(pydantic.BaseModel):
    pass


def test_a_tool_can_declare_its_limit_in_its_spec() -> None:
    @tool(name="busy.tool", description="d", side_effect=SideEffect.READ_ONLY, max_concurrent_calls=2)
    def busy(args: NoArgs, ctx: ToolContext) -> dict[str, str]:
        return {}

    assert tool_to_spec(busy).max_concurrent_calls == 2
    with pytest.raises(ValueError, match="max_concurrent_calls"):
        tool(name="bad.tool", description="d", side_effect=SideEffect.READ_ONLY, max_concurrent_calls=-1)(
            busy.fn
        )


TENANT_TOKENS = {"busy": "tok-busy-tenant", "calm": "tok-calm-tenant"}


@pytest.fixture
def per_tenant_runtime(
    tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str
) -> Iterator[RuntimeProcess]:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(
        "".join(
            f'[[tokens]]\nsha256 = "{hashlib.sha256(token.encode()).hexdigest()}"\n'
            f'subject = "{tenant}-runner"\ntenant = "{tenant}"\nroles = ["runner"]\n'
            for tenant, token in TENANT_TOKENS.items()
        )
    )
    path = tmp_path / "per_tenant.toml"
    path.write_text(
        f'db_url = "{sqlite_url}"\npoll_interval_s = 0.1\ngrace_s = 1.0\n'
        f'[auth]\ntokens_file = "{tokens}"\n'
        f'[[tool_hosts]]\nname = "local"\naddress = "{tool_host.address}"\n'
        '[tool_limits]\nmax_concurrent_calls_per_tenant = { "sleep.wait" = 1 }\n'
        + agent_toml("long", steps=LONG_NAP, tools=["sleep.wait"], budgets={"timeout_s": 60})
        + agent_toml("hurried", steps=LONG_NAP, tools=["sleep.wait"], budgets={"timeout_s": 3})
    )
    with spawn_runtime(["--config", str(path), "--listen", "127.0.0.1:0"], cwd=tmp_path) as runtime:
        yield runtime


def test_a_tenant_at_its_cap_of_a_tool_waits_while_another_tenants_call_goes_through(
    per_tenant_runtime: RuntimeProcess, tool_host: ToolHostProcess
) -> None:
    clients = {
        t: Client(per_tenant_runtime.address, token=tok, timeout=20) for t, tok in TENANT_TOKENS.items()
    }
    try:
        busy, calm = clients["busy"], clients["calm"]
        holder = busy.start_run("long", "nap").run_id
        wait_until(lambda: len(log_lines(tool_host)) == 1, "the busy tenant holding its slot")
        # The same tenant's next call waits for the slot until its deadline: never sent.
        hurried = busy.start_run("hurried", "nap").run_id
        other = calm.start_run("long", "nap").run_id
        wait_until(lambda: len(log_lines(tool_host)) == 2, "the calm tenant's call on the host")
        wait_until(lambda: busy.get_run(hurried).phase in TERMINAL, "the hurried run ended", timeout=15)
        ended = busy.get_run(hurried)
        events = "\n".join(str(e) for e in busy.stream_events(hurried, timeout=20))
        for client, run_id in ((busy, holder), (calm, other)):
            client.cancel_run(run_id, reason="done")
    finally:
        for client in clients.values():
            client.close()
    assert ended.phase == run_pb2.RUN_PHASE_EXPIRED
    assert "for this tenant" in events
    started = [line for line in log_lines(tool_host) if line.startswith("started ")]
    assert len(started) == 2  # the holder's and the other tenant's; the hurried call never left
