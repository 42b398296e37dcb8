"""Encryption at rest with real processes: ``[encryption] key_file`` on a runtime next to a tool host.

The refund agent runs to completion; the runtime's SQLite files (main file and WAL, while it runs
and after it stops) hold none of the input, the tool arguments or the tool results; a restarted
runtime serves the run back whole. A run whose key left the file fails alone, with a clear error.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from agentrt.client import Client, RPCError, event_type
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import ToolHostProcess, spawn_runtime
from agentrt.toolhost.security import write_key_file
from tests.e2e.conftest import write_config

ROOT = Path(__file__).resolve().parents[2]
INPUT = "please refund A100, ticket INPUTMARKER-5f1e"
# The refund agent's tool arguments (reason "broken") and results (the customer, the refund).
FIXED_MARKERS = ["INPUTMARKER-5f1e", "broken", "Lovelace", "Refunded 12.50"]


def secured_config(tmp_path: Path, tool_host: ToolHostProcess, key_file: Path) -> Path:
    db_url = f"sqlite:///{tmp_path / 'agentrt.sqlite'}"
    path = write_config(tmp_path / "agentrt.toml", db_url=db_url, tool_host_address=tool_host.address)
    path.write_text(path.read_text() + f'[encryption]\nkey_file = "{key_file}"\n')
    return path


def database_bytes(tmp_path: Path) -> bytes:
    files = [tmp_path / "agentrt.sqlite", tmp_path / "agentrt.sqlite-wal"]
    return b"".join(f.read_bytes() for f in files if f.exists())


def key_texts(key_file: Path) -> list[str]:
    return list(json.loads(key_file.read_text())["keys"].values())


def test_the_refund_run_leaves_no_plaintext_on_disk_and_reads_back_after_a_restart(
    tmp_path: Path, tool_host: ToolHostProcess
) -> None:
    key_file = tmp_path / "keys.json"
    write_key_file(key_file)
    config = secured_config(tmp_path, tool_host, key_file)
    args = ["--config", str(config), "--listen", "127.0.0.1:0"]
    with spawn_runtime(args, cwd=tmp_path) as runtime, Client(runtime.address) as client:
        events = list(client.run_agent("refund", INPUT, metadata={"crm": "METAMARKER-77"}, timeout=60))
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
        run_id = events[0].run_id
        completed = [e.tool_completed for e in events if e.HasField("tool_completed")]
        refund = json.loads(completed[1].result_json)
        assert json.loads(completed[0].result_json)["customer"] == "Ada Lovelace"
        started = [e.tool_started for e in events if e.HasField("tool_started")]
        assert json.loads(started[1].arguments_json)["reason"] == "broken"
        markers = [*FIXED_MARKERS, "METAMARKER-77", refund["refund_id"]]
        before = client.get_run(run_id)
        assert before.input == INPUT and before.output == "Refunded 12.50 for A100."
        live = database_bytes(tmp_path)  # while it runs: the WAL may hold what is not checkpointed
        assert run_id.encode() in live and b"enc:v1:" in live
        assert [m for m in markers if m.encode() in live] == []
    stopped = database_bytes(tmp_path)
    assert [m for m in markers if m.encode() in stopped] == []
    assert runtime.process.returncode == 0

    with spawn_runtime(args, cwd=tmp_path) as runtime, Client(runtime.address) as client:
        assert client.get_run(run_id) == before
        assert dict(before.metadata) == {"crm": "METAMARKER-77"}
        replayed = list(client.stream_events(run_id, timeout=10))
        assert [e.SerializeToString(deterministic=True) for e in replayed] == [
            e.SerializeToString(deterministic=True) for e in events
        ]
        assert [r.run_id for r in client.list_runs().runs] == [run_id]
        assert runtime.stop() == 0
        assert not any(k in runtime.stderr_text() for k in key_texts(key_file))


def test_a_run_whose_key_left_the_file_fails_alone_with_a_clear_error(
    tmp_path: Path, tool_host: ToolHostProcess
) -> None:
    key_file = tmp_path / "keys.json"
    write_key_file(key_file, active="k1")
    old_key = key_texts(key_file)[0]
    config = secured_config(tmp_path, tool_host, key_file)
    args = ["--config", str(config), "--listen", "127.0.0.1:0"]
    with spawn_runtime(args, cwd=tmp_path) as runtime, Client(runtime.address) as client:
        events = list(client.run_agent("refund", INPUT, timeout=60))
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
        lost = events[0].run_id

    write_key_file(key_file, active="k2")  # a fresh file: k1 is gone
    with spawn_runtime(args, cwd=tmp_path) as runtime, Client(runtime.address) as client:
        for read in (lambda: client.get_run(lost), lambda: list(client.stream_events(lost, timeout=10))):
            with pytest.raises(RPCError) as caught:
                read()
            error = caught.value
            assert error.code == grpc.StatusCode.INTERNAL and error.reason == "RECORD_UNREADABLE"
            assert f"run {lost}" in error.message and "'k1'" in error.message
            assert error.error_info is not None and error.error_info.metadata["run_id"] == lost
            assert old_key not in error.message
        # Other runs are unaffected: a new run completes and reads back; the list shows both.
        events = list(client.run_agent("refund", INPUT, timeout=60))
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
        fresh = events[0].run_id
        assert client.get_run(fresh).input == INPUT
        assert [event_type(e) for e in client.stream_events(fresh, timeout=10)] == [
            event_type(e) for e in events
        ]
        assert {r.run_id for r in client.list_runs().runs} == {lost, fresh}
        runtime.stop()
        assert not any(k in runtime.stderr_text() for k in [old_key, *key_texts(key_file)])


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read key file"),
        (
            json.dumps({"active": "k1", "keys": {"k1": base64.b64encode(b"sixteen byte key").decode()}}),
            "16 bytes",
        ),
    ],
)
def test_a_bad_key_file_exits_2_naming_the_file_and_writes_nothing(
    tmp_path: Path, tool_host: ToolHostProcess, content: str | None, expected: str
) -> None:
    key_file = tmp_path / "keys.json"
    if content is not None:
        key_file.write_text(content)
    config = secured_config(tmp_path, tool_host, key_file)
    done = subprocess.run(
        [sys.executable, "-m", "agentrt.server", "--config", str(config), "--listen", "127.0.0.1:0"],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),  # this checkout's code, whatever is installed
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert f"encryption.key_file {key_file}" in done.stderr and expected in done.stderr
    assert "c2l4dGVlbiBieXRlIGtleQ" not in done.stderr and "sixteen byte key" not in done.stderr
    assert not (tmp_path / "agentrt.sqlite").exists()
