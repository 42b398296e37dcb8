"""Large tool results by reference (R8.4), with a real runtime and a real tool host.

A tool returning 10 MB: the run completes, its events stream live and replay after the end
(StreamRunEvents from 0, RunAgent with the same request key), GetRun answers, and GetPayload gives
the result back byte-identical, on SQLite and PostgreSQL, in the database and in the file store.
No event is ever near the 4 MiB response cap. A 200 MB result is refused by the tool host with
RESULT_TOO_LARGE and the run goes on (the model is told). Another tenant cannot read a payload;
malformed ids are INVALID_ARGUMENT before any lookup.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2

from agentrt.client import Client, RPCError
from agentrt.plugins.blob_tools import blob_text
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.testing import RuntimeProcess, ToolHostProcess, spawn_runtime, spawn_tool_host
from agentrt.toolhost.security import write_key_file
from tests.e2e.conftest import agent_toml, toml_value

MiB = 1024 * 1024
RESPONSE_CAP = 4 * MiB
TEN_MB = 10 * 1000 * 1000
TOKENS = {"alice": ("acme", ["runner"]), "carol": ("globex", ["runner"])}


def blob_json(size: int, seed: str = "") -> bytes:
    # What blob.make returns, as the tool host serialises it.
    return json.dumps({"blob": blob_text(size, seed)}, separators=(",", ":")).encode()


def blob_steps(size: int, seed: str = "") -> list[dict[str, object]]:
    call = {"tool": "blob.make", "arguments": {"size_bytes": size, "seed": seed}}
    return [{"text": "making a blob", "tool_calls": [call]}, {"text": "made it"}]


def write_tokens(path: Path) -> dict[str, str]:
    tokens = {name: f"tok-{name}-{uuid.uuid4().hex}" for name in TOKENS}
    text = ""
    for name, (tenant, roles) in TOKENS.items():
        digest = hashlib.sha256(tokens[name].encode()).hexdigest()
        text += f'[[tokens]]\nsha256 = "{digest}"\nsubject = "{name}"\ntenant = "{tenant}"\n'
        text += f"roles = {toml_value(roles)}\n"
    path.write_text(text)
    return tokens


def config(
    tmp_path: Path,
    *,
    db_url: str,
    host: ToolHostProcess,
    payloads: str = "",
    auth: bool = False,
    extra: str = "",
) -> Path:
    text = (
        f'db_url = "{db_url}"\nlease_ttl_s = 5.0\npoll_interval_s = 0.2\ngrace_s = 1.0\n'
        f'data_dir = "{tmp_path / "data"}"\n'
        f'[[tool_hosts]]\nname = "blobs"\naddress = "{host.address}"\n'
        f"[payloads]\n{payloads}"
    )
    text += extra
    if auth:
        text += f'[auth]\ntokens_file = "{tmp_path / "tokens.toml"}"\n'
    budgets = {"timeout_s": 120}
    text += agent_toml("ten-mb", steps=blob_steps(TEN_MB), tools=["blob.make"], budgets=budgets)
    text += agent_toml("huge", steps=blob_steps(200 * 1000 * 1000), tools=["blob.make"], budgets=budgets)
    text += agent_toml("mid", steps=blob_steps(100_000, "mid"), tools=["blob.make"], budgets=budgets)
    text += agent_toml("small", steps=blob_steps(1000, "small"), tools=["blob.make"], budgets=budgets)
    # The scripted model repeats the input: 80 x 60 kB is a 4.8 MB answer, 150 x is past 8 MiB.
    text += agent_toml("long-answer", steps=[{"text": "{input}" * 80}], tools=[], budgets=budgets)
    text += agent_toml("too-long", steps=[{"text": "{input}" * 150}], tools=[], budgets=budgets)
    text += agent_toml("echo", steps=[{"text": "{input}"}], tools=[], budgets=budgets)
    path = tmp_path / "agentrt.toml"
    path.write_text(text)
    return path


@pytest.fixture
def blob_host(tmp_path: Path) -> Iterator[ToolHostProcess]:
    with spawn_tool_host(tmp_path / "toolhost", plugins=["agentrt.plugins.blob_tools"]) as host:
        yield host


def runtime(path: Path, tmp_path: Path) -> contextlib.AbstractContextManager[RuntimeProcess]:
    return spawn_runtime(["--config", str(path), "--listen", "127.0.0.1:0"], cwd=tmp_path)


def assert_under_cap(events: list[run_pb2.RunEvent]) -> None:
    sizes = [e.ByteSize() for e in events]
    assert max(sizes) < RESPONSE_CAP // 4, sizes


def only(events: list[run_pb2.RunEvent], field: str) -> list[object]:
    return [getattr(e, field) for e in events if e.HasField(field)]


@pytest.mark.parametrize("store", ["db", "file"])
def test_a_10_mb_result_completes_streams_replays_and_reads_back_byte_identical(
    tmp_path: Path, blob_host: ToolHostProcess, db_url: str, store: str
) -> None:
    expected = blob_json(TEN_MB)
    path = config(tmp_path, db_url=db_url, host=blob_host, payloads=f'store = "{store}"\n')
    with runtime(path, tmp_path) as process, Client(process.address, timeout=30) as client:
        events = list(client.run_agent("ten-mb", "make it", request_key="k-10mb", timeout=120))
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
        assert_under_cap(events)
        run_id = events[0].run_id
        (completed,) = only(events, "tool_completed")
        assert isinstance(completed, run_pb2.ToolCompleted)
        ref = completed.result_ref
        assert ref.size_bytes == len(expected) and ref.sha256 == hashlib.sha256(expected).hexdigest()
        assert ref.payload_id == ref.sha256 and ref.media_type == "application/json"
        assert expected.decode().startswith(ref.preview) and 0 < len(ref.preview) <= 200
        # Truncate (the default): the model saw a bounded JSON view that names the payload.
        assert completed.truncated
        view = json.loads(completed.result_json)
        assert view["truncated"] is True and view["payload_id"] == ref.payload_id
        assert view["size_bytes"] == len(expected) and f"payload {ref.payload_id}" in view["note"]
        assert expected.decode().startswith(view["partial_result"]) and len(view["partial_result"]) > 60_000
        assert len(completed.result_json.encode()) <= 64 * 1024

        # Replays after the end: StreamRunEvents from 0, RunAgent with the same key, GetRun.
        replayed = list(client.stream_events(run_id, timeout=30))
        assert [e.SerializeToString(deterministic=True) for e in replayed] == [
            e.SerializeToString(deterministic=True) for e in events
        ]
        followed = list(client.stream_events(run_id, follow=True, timeout=30))
        assert [e.seq for e in followed] == [e.seq for e in events]
        again = list(client.run_agent("ten-mb", "make it", request_key="k-10mb", timeout=30))
        assert again[0].run_id == run_id
        assert [e.SerializeToString(deterministic=True) for e in again if e.seq] == [
            e.SerializeToString(deterministic=True) for e in events
        ]
        assert client.get_run(run_id).phase == run_pb2.RUN_PHASE_COMPLETED

        payload = client.get_payload(run_id, ref.payload_id, deadline_s=60)
        assert payload.data == expected
        assert payload.ref.size_bytes == len(expected) and payload.ref.sha256 == ref.sha256

    files = list((tmp_path / "data" / "payloads").rglob("*")) if store == "file" else []
    if store == "file":
        assert [f.name for f in files if f.is_file()] == [ref.payload_id]
        assert (tmp_path / "data" / "payloads" / run_id / ref.payload_id).read_bytes() == expected
    # A restarted runtime serves the run and the payload again.
    with runtime(path, tmp_path) as process, Client(process.address, timeout=30) as client:
        assert client.get_payload(run_id, ref.payload_id, deadline_s=60).data == expected
        assert_under_cap(list(client.stream_events(run_id, timeout=30)))


def test_a_200_mb_result_is_refused_and_the_run_goes_on(
    tmp_path: Path, blob_host: ToolHostProcess, sqlite_url: str
) -> None:
    path = config(tmp_path, db_url=sqlite_url, host=blob_host)
    with runtime(path, tmp_path) as process, Client(process.address, timeout=30) as client:
        events = list(client.run_agent("huge", "make it", timeout=120))
        assert_under_cap(events)
        (failed,) = only(events, "tool_failed")
        assert isinstance(failed, run_pb2.ToolFailed)
        assert failed.error.code == tool_pb2.TOOL_ERROR_CODE_RESULT_TOO_LARGE
        assert "the maximum is 67108864" in failed.error.message
        # The model was told, and the run went on to its answer.
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
        assert client.get_run(events[0].run_id).output == "made it"


def test_the_fail_policy_fails_the_call_and_keeps_the_full_result(
    tmp_path: Path, blob_host: ToolHostProcess, sqlite_url: str
) -> None:
    expected = blob_json(100_000, "mid")
    path = config(tmp_path, db_url=sqlite_url, host=blob_host, payloads='oversized_result = "fail"\n')
    with runtime(path, tmp_path) as process, Client(process.address, timeout=30) as client:
        events = list(client.run_agent("mid", "make it", timeout=60))
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
        (failed,) = only(events, "tool_failed")
        assert isinstance(failed, run_pb2.ToolFailed)
        assert failed.error.code == tool_pb2.TOOL_ERROR_CODE_RESULT_TOO_LARGE
        details = json.loads(failed.error.details_json)
        assert details["size_bytes"] == len(expected) and "more than the 65536" in failed.error.message
        assert f"payload {details['payload_id']}" in failed.error.message
        payload = client.get_payload(events[0].run_id, details["payload_id"])
        assert payload.data == expected


def test_results_between_inline_and_view_size_are_shown_whole_and_small_ones_stay_inline(
    tmp_path: Path, blob_host: ToolHostProcess, sqlite_url: str
) -> None:
    expected = blob_json(100_000, "mid")
    payloads = "inline_max_bytes = 16384\nmodel_view_max_bytes = 262144\n"
    path = config(tmp_path, db_url=sqlite_url, host=blob_host, payloads=payloads)
    with runtime(path, tmp_path) as process, Client(process.address, timeout=30) as client:
        events = list(client.run_agent("mid", "make it", timeout=60))
        (completed,) = only(events, "tool_completed")
        assert isinstance(completed, run_pb2.ToolCompleted)
        assert completed.result_json.encode() == expected and not completed.truncated
        assert completed.result_ref.size_bytes == len(expected)
        assert client.get_payload(events[0].run_id, completed.result_ref.payload_id).data == expected
        # The command line writes it to a file, or says what is wrong.
        out = tmp_path / "result.json"
        cli = [
            sys.executable,
            "-m",
            "agentrt.client",
            "--target",
            process.address,
            "payload",
            events[0].run_id,
        ]
        done = subprocess.run(
            [*cli, completed.result_ref.payload_id, "-o", str(out)], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        assert out.read_bytes() == expected and completed.result_ref.sha256 in done.stderr
        done = subprocess.run([*cli, "0" * 64], capture_output=True, text=True)
        assert done.returncode == 2 and "NOT_FOUND" in done.stderr and "PAYLOAD_NOT_FOUND" in done.stderr

        events = list(client.run_agent("small", "make it", timeout=60))
        (completed,) = only(events, "tool_completed")
        assert isinstance(completed, run_pb2.ToolCompleted)
        assert completed.result_json.encode() == blob_json(1000, "small")
        assert not completed.HasField("result_ref") and not completed.truncated


def test_payloads_are_tenant_scoped_and_ids_are_checked_before_any_lookup(
    tmp_path: Path, blob_host: ToolHostProcess, sqlite_url: str
) -> None:
    tokens = write_tokens(tmp_path / "tokens.toml")
    path = config(tmp_path, db_url=sqlite_url, host=blob_host, auth=True)
    with runtime(path, tmp_path) as process:
        alice = Client(process.address, token=tokens["alice"], timeout=30)
        carol = Client(process.address, token=tokens["carol"], timeout=30)
        anonymous = Client(process.address, timeout=30)
        with alice, carol, anonymous:
            events = list(alice.run_agent("mid", "make it", timeout=60))
            run_id = events[0].run_id
            (completed,) = only(events, "tool_completed")
            assert isinstance(completed, run_pb2.ToolCompleted)
            payload_id = completed.result_ref.payload_id
            assert alice.get_payload(run_id, payload_id).data == blob_json(100_000, "mid")

            missing = hashlib.sha256(b"nothing").hexdigest()
            no_such_run = "0" * len(run_id)
            not_found = []
            for who, (rid, pid) in [
                (carol, (run_id, payload_id)),
                (carol, (no_such_run, payload_id)),
                (alice, (run_id, missing)),
            ]:
                with pytest.raises(RPCError) as caught:
                    who.get_payload(rid, pid)
                not_found.append((caught.value.code, caught.value.reason))
            # Another tenant's payload answers exactly like one of a run that does not exist; a
            # missing payload of the caller's own run is PAYLOAD_NOT_FOUND.
            assert not_found == [
                (grpc.StatusCode.NOT_FOUND, "RUN_NOT_FOUND"),
                (grpc.StatusCode.NOT_FOUND, "RUN_NOT_FOUND"),
                (grpc.StatusCode.NOT_FOUND, "PAYLOAD_NOT_FOUND"),
            ]

            with pytest.raises(RPCError) as caught:
                anonymous.get_payload(run_id, payload_id)
            assert caught.value.code == grpc.StatusCode.UNAUTHENTICATED

            bad = [
                ("run_id", "", payload_id),
                ("run_id", "../" + run_id, payload_id),
                ("run_id", "r" * 5000, payload_id),
                ("run_id", run_id + "/x", payload_id),
                ("payload_id", run_id, ""),
                ("payload_id", run_id, payload_id.upper()),
                ("payload_id", run_id, "../../" + payload_id[:58]),
                ("payload_id", run_id, payload_id + "0"),
                ("payload_id", run_id, "g" * 64),
                ("payload_id", run_id, "x" * 100_000),
            ]
            for field, rid, pid in bad:
                with pytest.raises(RPCError) as caught:
                    alice.get_payload(rid, pid)
                error = caught.value
                assert error.code == grpc.StatusCode.INVALID_ARGUMENT, (field, rid[:20], pid[:20])
                violations = error.detail(error_details_pb2.BadRequest)
                assert violations is not None
                assert [v.field for v in violations.field_violations] == [field]
                assert len(error.message) < 200 and "xxxxxxxx" not in error.message


def test_a_long_model_answer_is_stored_once_and_every_read_path_stays_under_the_cap(
    tmp_path: Path, blob_host: ToolHostProcess, sqlite_url: str
) -> None:
    unit = "".join(chr(0x41 + i % 26) for i in range(59_999)) + "\u00e9"  # 60,001 bytes, one non-ASCII
    answer = (unit * 80).encode()
    path = config(tmp_path, db_url=sqlite_url, host=blob_host)
    with runtime(path, tmp_path) as process, Client(process.address, timeout=30) as client:
        events = list(client.run_agent("long-answer", unit, request_key="long", timeout=60))
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
        assert_under_cap(events)
        (model,) = only(events, "model_completed")
        assert isinstance(model, run_pb2.ModelCompleted)
        ref = model.text_ref
        assert ref.size_bytes == len(answer) and ref.sha256 == hashlib.sha256(answer).hexdigest()
        assert ref.media_type == "text/plain; charset=utf-8"
        assert model.text.endswith(
            f"[truncated: the full text is payload {ref.payload_id} of {len(answer)} bytes]"
        )
        assert len(model.text.encode()) <= 64 * 1024 and answer.decode().startswith(
            model.text.split("\n[")[0]
        )
        (done,) = only(events, "run_completed")
        assert isinstance(done, run_pb2.RunCompleted)
        assert done.output == model.text and done.output_ref == ref
        run = client.get_run(events[0].run_id)
        assert run.output == model.text and run.output_ref == ref and run.ByteSize() < RESPONSE_CAP // 4
        assert client.list_runs().runs[0].ByteSize() < RESPONSE_CAP // 4
        assert_under_cap(list(client.stream_events(run.run_id, timeout=30)))
        again = list(client.run_agent("long-answer", unit, request_key="long", timeout=30))
        assert_under_cap(again)
        assert client.get_payload(run.run_id, ref.payload_id).data == answer

        events = list(client.run_agent("too-long", unit, timeout=60))
        assert_under_cap(events)
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_FAILED
        (failed,) = only(events, "run_failed")
        assert isinstance(failed, run_pb2.RunFailed)
        assert failed.reason == "model_output_too_large" and "the maximum is 8388608" in failed.message
        # The call's usage is recorded; its output is not kept.
        (refused,) = only(events, "model_completed")
        assert isinstance(refused, run_pb2.ModelCompleted)
        assert refused.usage_after.model_steps == 1 and refused.usage_after.output_tokens > 0
        assert refused.text.startswith("[refused: the model's text is ") and not refused.HasField("text_ref")
        assert client.get_run(events[0].run_id).usage.model_steps == 1


def test_a_large_input_is_stored_once_and_the_model_sees_it_whole(
    tmp_path: Path, blob_host: ToolHostProcess, sqlite_url: str
) -> None:
    question = blob_text(3_000_000, "question")
    path = config(tmp_path, db_url=sqlite_url, host=blob_host, extra="[limits]\nmax_input_bytes = 3500000\n")
    with runtime(path, tmp_path) as process, Client(process.address, timeout=30) as client:
        events = list(client.run_agent("echo", question, timeout=60))
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
        assert_under_cap(events)
        started = events[0].run_started
        ref = started.input_ref
        assert ref.size_bytes == len(question) and ref.sha256 == hashlib.sha256(question.encode()).hexdigest()
        assert started.input.endswith(
            f"[truncated: the full text is payload {ref.payload_id} of 3000000 bytes]"
        )
        run = client.get_run(events[0].run_id)
        assert run.input == started.input and run.input_ref == ref and run.ByteSize() < RESPONSE_CAP // 4
        assert client.get_payload(run.run_id, ref.payload_id).text() == question
        # The scripted model answers with the input it was given: the whole one, not the view.
        assert run.output_ref.sha256 == ref.sha256
        assert client.get_payload(run.run_id, run.output_ref.payload_id).text() == question


@pytest.mark.parametrize("store", ["db", "file"])
def test_payloads_are_sealed_at_rest_when_encryption_is_on(
    tmp_path: Path, blob_host: ToolHostProcess, store: str
) -> None:
    key_file = tmp_path / "keys.json"
    write_key_file(key_file)
    db_file = tmp_path / "agentrt.sqlite"
    extra = f'[encryption]\nkey_file = "{key_file}"\n'
    path = config(
        tmp_path, db_url=f"sqlite:///{db_file}", host=blob_host, payloads=f'store = "{store}"\n', extra=extra
    )
    expected = blob_json(TEN_MB)
    marker = expected[20:84]  # 64 hex digits of the blob
    with runtime(path, tmp_path) as process, Client(process.address, timeout=30) as client:
        events = list(client.run_agent("ten-mb", "make it", timeout=120))
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
        (completed,) = only(events, "tool_completed")
        assert isinstance(completed, run_pb2.ToolCompleted)
        assert client.get_payload(events[0].run_id, completed.result_ref.payload_id).data == expected
    on_disk = [p for p in [db_file, *(tmp_path / "data").rglob("*")] if p.is_file()]
    on_disk += [p for p in tmp_path.glob("agentrt.sqlite-*") if p.is_file()]
    assert [p.name for p in on_disk if marker in p.read_bytes()] == []
