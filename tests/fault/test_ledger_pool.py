"""Two real tool host processes of one pool share a PostgreSQL ledger (issue 18, tool host pools).

The same write sent to both hosts at once runs once; GetOperation on either host answers for a
call the other completed; a host killed with SIGKILL mid-write is settled by the other through
the plugin's query hook, and the write never runs twice; a bad ledger URL stops a host at start
with a clear message and no password.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.proto.toolhost.v1.tool_host_service_pb2 import (
    GetOperationRequest,
    InvokeToolRequest,
    InvokeToolResponse,
)
from agentrt.proto.toolhost.v1.tool_host_service_pb2_grpc import ToolHostServiceStub
from agentrt.testing import ToolHostProcess, start_tool_host
from tests.fault._pool_plugin import charges

pytestmark = pytest.mark.postgres

PLUGIN = str(Path(__file__).with_name("_pool_plugin.py"))
CHARGE = json.dumps({"order_id": "A100", "amount": 30.0})


class Pool:
    """Two hosts on one ledger schema, one plugin store and one release file."""

    def __init__(self, tmp_path: Path, ledger_url: str) -> None:
        self.store = tmp_path / "charges.sqlite"
        self.release = tmp_path / "release"
        self.schema = f"t_{uuid.uuid4().hex[:12]}"
        self.ledger_url = ledger_url
        self.tmp_path = tmp_path
        self.hosts: list[ToolHostProcess] = []
        self.channels: list[grpc.Channel] = []

    def start(self, name: str) -> tuple[ToolHostProcess, ToolHostServiceStub]:
        host = start_tool_host(
            self.tmp_path / name,
            plugins=[PLUGIN],
            extra_args=[
                *("--set", f"store={self.store}", "--set", f"release={self.release}"),
                *("--ledger-url", self.ledger_url, "--ledger-schema", self.schema),
                *("--ledger-owner-ttl-s", "1"),
            ],
        )
        self.hosts.append(host)
        channel = grpc.insecure_channel(host.address)
        self.channels.append(channel)
        return host, ToolHostServiceStub(channel)

    def close(self) -> None:
        for channel in self.channels:
            channel.close()
        for host in self.hosts:
            host.stop()


@pytest.fixture
def pool(tmp_path: Path, pg_database: str) -> Iterator[Pool]:
    pool = Pool(tmp_path, pg_database)
    try:
        yield pool
    finally:
        pool.release.touch()
        pool.close()


def _invoke(stub: ToolHostServiceStub, key: str, *, timeout: float = 30) -> InvokeToolResponse:
    metadata = [
        ("x-agentrt-idempotency-key", key),
        ("x-agentrt-run-id", "run-1"),
        ("x-agentrt-call-id", "c1"),
    ]
    response: InvokeToolResponse = stub.InvokeTool(
        InvokeToolRequest(tool="pool.charge", arguments_json=CHARGE), metadata=metadata, timeout=timeout
    )
    return response


def _status(stub: ToolHostServiceStub, key: str) -> int:
    status: int = stub.GetOperation(GetOperationRequest(idempotency_key=key), timeout=10).operation.status
    return status


def _wait_until(condition: Callable[[], bool], *, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_the_same_write_sent_to_both_hosts_at_once_runs_once_and_either_answers_for_it(pool: Pool) -> None:
    _, a = pool.start("a")
    _, b = pool.start("b")
    key = f"k-{uuid.uuid4().hex}"
    answers: dict[str, InvokeToolResponse] = {}
    barrier = threading.Barrier(2)

    def send(name: str, stub: ToolHostServiceStub) -> None:
        barrier.wait()
        answers[name] = _invoke(stub, key)

    threads = [threading.Thread(target=send, args=item) for item in (("a", a), ("b", b))]
    for thread in threads:
        thread.start()
    # One host runs it and holds after the effect; the other answers at once: running elsewhere.
    _wait_until(lambda: len(answers) == 1)
    (busy,) = answers.values()
    assert busy.error.code == tool_pb2.TOOL_ERROR_CODE_TRANSIENT
    assert json.loads(busy.error.details_json)["still_running"] is True
    assert charges(pool.store, key) == 1
    # Either host reports it RUNNING while it runs (the owner is alive: not an orphan).
    assert _status(a, key) == _status(b, key) == tool_pb2.OPERATION_STATUS_RUNNING
    pool.release.touch()
    for thread in threads:
        thread.join()
    ran = [r for r in answers.values() if r.HasField("result_json")]
    assert len(ran) == 1 and json.loads(ran[0].result_json) == {"charged": "A100"}
    # A retry on either host replays; GetOperation on either answers SUCCEEDED.
    for stub in (a, b):
        replay = _invoke(stub, key)
        assert replay.replayed and json.loads(replay.result_json) == {"charged": "A100"}
        assert _status(stub, key) == tool_pb2.OPERATION_STATUS_SUCCEEDED
    assert charges(pool.store, key) == 1


def test_a_host_killed_mid_write_is_settled_by_the_other_and_the_write_never_runs_twice(pool: Pool) -> None:
    host_a, a = pool.start("a")
    _, b = pool.start("b")
    key = f"k-{uuid.uuid4().hex}"
    call = a.InvokeTool.future(
        InvokeToolRequest(tool="pool.charge", arguments_json=CHARGE),
        metadata=[("x-agentrt-idempotency-key", key), ("x-agentrt-run-id", "run-1")],
        timeout=30,
    )
    _wait_until(lambda: charges(pool.store, key) == 1)  # the effect happened; the reply has not
    host_a.kill()  # SIGKILL: no drain, no sign-off, the entry stays RUNNING under a dead owner
    with pytest.raises(grpc.RpcError):
        call.result()
    # B never runs it blind: busy while A's heartbeat is fresh, an unknown outcome after.
    busy = _invoke(b, key)
    assert busy.error.code == tool_pb2.TOOL_ERROR_CODE_TRANSIENT
    # Once it expires (TTL 1 s), B's GetOperation asks the plugin's store and settles it.
    _wait_until(lambda: _status(b, key) == tool_pb2.OPERATION_STATUS_SUCCEEDED)
    replay = _invoke(b, key)
    assert replay.replayed and json.loads(replay.result_json) == {"charged": "A100"}
    assert charges(pool.store, key) == 1


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "postgresql://agent:pw-Zq9@127.0.0.1:1/ledger",
            "agent:***@127.0.0.1:1/ledger schema agentrt_toolhost: open failed",
        ),
        ("mysql://agent:pw-Zq9@127.0.0.1/ledger", "must be postgresql://"),
    ],
)
def test_a_bad_ledger_url_stops_the_host_at_start_without_the_password(
    tmp_path: Path, url: str, expected: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentrt.toolhost", "--no-entrypoints", "--data-dir", str(tmp_path)],
        env={"AGENTRT_TOOLHOST_LEDGER_URL": url, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert expected in done.stderr and "pw-Zq9" not in done.stderr + done.stdout
