"""The client, the CLI and grpcurl against a runtime process serving mTLS on loopback, and bearer tokens.

One runtime (``[tls]`` with a client CA, no ``[auth]``: every caller is the local principal)
and one tool host serve the whole module. Bearer tokens are checked against an in-process
gRPC server that records the metadata each call carried.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentrt.client import AsyncClient, Client, CredentialsError, UnavailableError, cli, event_type
from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2, runtime_service_pb2_grpc
from agentrt.testing import RuntimeProcess, spawn_runtime, spawn_tool_host
from agentrt.toolhost.security import DevPki, generate_dev_pki
from tests.e2e.conftest import write_config

TOKEN = "tls-t0ken-never-logged"
GRPCURL = str(Path(sys.executable).parent / "grpcurl")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> DevPki:
    return generate_dev_pki(tmp_path_factory.mktemp("pki"), clients=["alice"])


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory, pki: DevPki) -> Iterator[RuntimeProcess]:
    root = tmp_path_factory.mktemp("runtime")
    with spawn_tool_host(root / "toolhost", plugins=["agentrt.plugins.demo_tools"]) as host:
        config = write_config(
            root / "agentrt.toml",
            db_url=f"sqlite:///{root / 'agentrt.sqlite'}",
            tool_host_address=host.address,
        )
        with config.open("a") as fh:
            fh.write(
                f'[tls]\ncert_file = "{pki.server_cert_file}"\nkey_file = "{pki.server_key_file}"\n'
                f'client_ca_file = "{pki.ca_file}"\n'
            )
        with spawn_runtime(["--config", str(config), "--listen", "127.0.0.1:0"], cwd=root) as process:
            yield process


def mtls(pki: DevPki) -> dict[str, str]:
    cert, key = pki.client_files["alice"]
    return {"ca_file": str(pki.ca_file), "cert_file": str(cert), "key_file": str(key)}


def run_ids(client: Client) -> set[str]:
    return {run.run_id for run in client.list_runs(page_size=500).runs}


def test_client_with_ca_and_client_certificate_runs_the_refund_to_completion(
    runtime: RuntimeProcess, pki: DevPki
) -> None:
    # A token rides along too: this server ignores it (no [auth]) but must never log it.
    with Client(runtime.address, token=TOKEN, **mtls(pki)) as client:
        events = list(client.run_agent("refund", "please refund A100", timeout=60))
        assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED
        assert "tool.completed" in {event_type(e) for e in events}
        run = client.get_run(events[0].run_id)
    assert run.phase == run_pb2.RUN_PHASE_COMPLETED and run.created_by == "local"
    assert TOKEN not in runtime.stderr_text()


async def test_async_client_takes_its_credentials_from_the_environment(
    runtime: RuntimeProcess, pki: DevPki, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = mtls(pki)
    monkeypatch.setenv("AGENTRT_CA", files["ca_file"])
    monkeypatch.setenv("AGENTRT_CERT", files["cert_file"])
    monkeypatch.setenv("AGENTRT_KEY", files["key_file"])
    monkeypatch.setenv("AGENTRT_SERVER_NAME", "localhost")  # a name the server certificate carries
    async with AsyncClient(runtime.address) as client:
        events = [e async for e in client.run_agent("refund", "refund A100 again", timeout=60)]
    assert events[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED


@pytest.mark.parametrize(
    ("options", "hint"),
    [
        ({"cert_file": None, "key_file": None}, "if it requires a client certificate (mTLS), give one"),
        ({"ca_file": None, "tls": True}, "did not verify against the system's CAs: give its CA"),
        ({"ca_file": "other"}, "did not verify against the given CA"),
        ({"server_name": "runtime.example"}, "does not name the host of 127.0.0.1"),
        ({"ca_file": "", "cert_file": "", "key_file": ""}, "if it serves TLS, give its CA"),
    ],
    ids=["no-client-cert", "no-ca", "wrong-ca", "wrong-name", "plaintext"],
)
def test_a_connection_the_server_cannot_trust_or_verify_is_unavailable_with_a_hint(
    runtime: RuntimeProcess,
    pki: DevPki,
    tmp_path: Path,
    options: dict[str, Any],
    hint: str,
) -> None:
    with Client(runtime.address, **mtls(pki)) as good:
        before = run_ids(good)
    files: dict[str, Any] = mtls(pki) | options
    if files.get("ca_file") == "other":
        files["ca_file"] = str(generate_dev_pki(tmp_path / "other", clients=[]).ca_file)
    files = {k: v for k, v in files.items() if v is not None}
    with Client(runtime.address, timeout=10, **files) as client, pytest.raises(UnavailableError) as caught:
        client.start_run("refund", "refund A100")
    assert caught.value.code == grpc.StatusCode.UNAVAILABLE and hint in caught.value.hint
    assert hint in str(caught.value)
    with Client(runtime.address, **mtls(pki)) as good:
        assert run_ids(good) == before  # nothing was started


def test_cli_with_flags_and_with_environment(
    runtime: RuntimeProcess, pki: DevPki, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    files = mtls(pki)
    flags = ["--ca", files["ca_file"], "--cert", files["cert_file"], "--key", files["key_file"]]
    assert cli.main(["--target", runtime.address, *flags, "run", "refund", "refund via cli", "--follow"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("#1  run.started  agent=refund") and out[0].endswith("by=local")
    assert out[-1].startswith(f"#{len([line for line in out if line.startswith('#')])}  run.ended  COMPLETED")
    # The same options after the command.
    assert cli.main(["list", "--agent", "refund", "--target", runtime.address, *flags]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed and all("COMPLETED  refund" in line for line in listed)

    monkeypatch.setenv("AGENTRT_TARGET", runtime.address)
    monkeypatch.setenv("AGENTRT_CA", files["ca_file"])
    monkeypatch.setenv("AGENTRT_CERT", files["cert_file"])
    monkeypatch.setenv("AGENTRT_KEY", files["key_file"])
    assert cli.main(["--json", "run", "refund", "refund via env", "--follow"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert events[-1]["run_ended"]["phase"] == "RUN_PHASE_COMPLETED"
    assert cli.main(["list", "--limit", "100"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(listed) + 1

    # An explicit empty flag turns the environment's client certificate off: refused, clearly.
    assert cli.main(["list", "--cert", "", "--key", ""]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: UNAVAILABLE failed to connect to all addresses")
    assert err[1] == (
        "hint: the server closed the TLS connection: if it requires a client certificate (mTLS), "
        "give one (cert_file and key_file, --cert and --key)"
    )


def test_grpcurl_with_tls_client_certificate_and_bearer_token(runtime: RuntimeProcess, pki: DevPki) -> None:
    files = mtls(pki)
    tls = ["-cacert", files["ca_file"], "-cert", files["cert_file"], "-key", files["key_file"]]
    bearer = ["-H", f"authorization: Bearer {TOKEN}"]

    def grpcurl(*args: str) -> str:
        done = subprocess.run([GRPCURL, *tls, *bearer, *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "agentrt.runtime.v1.AgentRuntimeService" in grpcurl(runtime.address, "list").split()
    out = grpcurl(
        "-d", '{"agent_name": "refund", "input": "refund A100"}', runtime.address,
        "agentrt.runtime.v1.AgentRuntimeService/StartRun",
    )  # fmt: skip
    run_id = json.loads(out)["run"]["run_id"]
    got = grpcurl(
        "-d", json.dumps({"run_id": run_id}), runtime.address, "agentrt.runtime.v1.AgentRuntimeService/GetRun"
    )  # fmt: skip
    assert json.loads(got)["run"]["run_id"] == run_id
    # Plaintext to the TLS port fails.
    done = subprocess.run(
        [GRPCURL, "-plaintext", runtime.address, "list"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert TOKEN not in runtime.stderr_text()


# --- bearer tokens, seen by a server that records what each call carried ---


class Recorder(runtime_service_pb2_grpc.AgentRuntimeServiceServicer):
    def __init__(self) -> None:
        self.authorization: list[str | None] = []

    def GetRun(
        self, request: runtime_service_pb2.GetRunRequest, context: grpc.ServicerContext
    ) -> runtime_service_pb2.GetRunResponse:
        metadata = dict((k, v) for k, v in context.invocation_metadata() if isinstance(v, str))
        self.authorization.append(metadata.get("authorization"))
        return runtime_service_pb2.GetRunResponse(run=run_pb2.Run(run_id=request.run_id))

    def StreamRunEvents(
        self, request: runtime_service_pb2.StreamRunEventsRequest, context: grpc.ServicerContext
    ) -> Iterator[runtime_service_pb2.StreamRunEventsResponse]:
        metadata = dict((k, v) for k, v in context.invocation_metadata() if isinstance(v, str))
        self.authorization.append(metadata.get("authorization"))
        yield runtime_service_pb2.StreamRunEventsResponse(
            event=run_pb2.RunEvent(run_id=request.run_id, seq=1)
        )


@pytest.fixture
def recorder(pki: DevPki) -> Iterator[tuple[Recorder, str, str]]:
    """A TLS port and a plaintext port, both on loopback."""
    servicer = Recorder()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    runtime_service_pb2_grpc.add_AgentRuntimeServiceServicer_to_server(servicer, server)
    credentials = grpc.ssl_server_credentials(
        [(pki.server_key_file.read_bytes(), pki.server_cert_file.read_bytes())]
    )
    tls_port = server.add_secure_port("127.0.0.1:0", credentials)
    plain_port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, f"127.0.0.1:{tls_port}", f"127.0.0.1:{plain_port}"
    finally:
        server.stop(grace=None)


def test_token_is_sent_as_a_bearer_header_over_tls(
    recorder: tuple[Recorder, str, str], pki: DevPki, tmp_path: Path
) -> None:
    servicer, tls_target, _ = recorder
    with Client(tls_target, ca_file=str(pki.ca_file), token=TOKEN) as client:
        client.get_run("r1")
        assert [e.run_id for e in client.stream_events("r1")] == ["r1"]
    token_file = tmp_path / "token"
    token_file.write_text("from-a-file\n")
    with Client(tls_target, ca_file=str(pki.ca_file), token_file=str(token_file)) as client:
        client.get_run("r2")
    with Client(tls_target, ca_file=str(pki.ca_file)) as client:
        client.get_run("r3")
    assert servicer.authorization == [f"Bearer {TOKEN}", f"Bearer {TOKEN}", "Bearer from-a-file", None]


async def test_async_token_over_tls_and_over_plaintext_loopback(
    recorder: tuple[Recorder, str, str], pki: DevPki
) -> None:
    servicer, tls_target, plain_target = recorder
    async with AsyncClient(tls_target, ca_file=str(pki.ca_file), token=TOKEN) as client:
        await client.get_run("r1")
    async with AsyncClient(plain_target, token=TOKEN) as client:
        await client.get_run("r2")
        assert [e.run_id async for e in client.stream_events("r2")] == ["r2"]
    assert servicer.authorization == [f"Bearer {TOKEN}"] * 3


def test_cli_sends_the_token_file_over_tls(
    recorder: tuple[Recorder, str, str], pki: DevPki, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    servicer, tls_target, _ = recorder
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    argv = ["--target", tls_target, "--ca", str(pki.ca_file), "--token-file", str(token_file), "get", "r9"]
    assert cli.main(argv) == 0
    assert capsys.readouterr().out.startswith("run r9")
    assert servicer.authorization == [f"Bearer {TOKEN}"]


def test_a_token_is_never_sent_in_clear_off_loopback(recorder: tuple[Recorder, str, str]) -> None:
    servicer, _, plain_target = recorder
    port = plain_target.rpartition(":")[2]
    # The same server, reached by a name that is not loopback: refused before any connection.
    for target in (f"dns:///agentrt.invalid:{port}", f"10.255.255.1:{port}"):
        with pytest.raises(CredentialsError, match="refusing to send a token in clear") as caught:
            Client(target, token=TOKEN)
        assert TOKEN not in str(caught.value)
    assert servicer.authorization == []


def test_tls_to_a_plaintext_port_is_unavailable_with_a_hint(
    recorder: tuple[Recorder, str, str], pki: DevPki
) -> None:
    servicer, _, plain_target = recorder
    client = Client(plain_target, ca_file=str(pki.ca_file), token=TOKEN, timeout=10)
    with client, pytest.raises(UnavailableError) as caught:
        client.get_run("r1")
    assert "is it serving plaintext" in caught.value.hint, caught.value.message
    assert TOKEN not in str(caught.value) and servicer.authorization == []


def test_the_demo_ignores_client_credentials_in_the_environment(pki: DevPki, tmp_path: Path) -> None:
    # The demo's runtime is local plaintext; neither it nor the demo's client may pick these up.
    files = mtls(pki)
    env = dict(
        os.environ,
        PYTHONPATH=str(Path(__file__).resolve().parents[2]),
        AGENTRT_CA=files["ca_file"],
        AGENTRT_CERT=files["cert_file"],
        AGENTRT_KEY=files["key_file"],
        AGENTRT_TOKEN=TOKEN,
        AGENTRT_SERVER_NAME="runtime.example",
        AGENTRT_TLS="1",
    )
    done = subprocess.run(
        [sys.executable, "-m", "agentrt.client", "demo"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "run.ended  COMPLETED" in done.stdout and TOKEN not in done.stdout + done.stderr


def test_grpcurl_takes_the_token_from_the_environment(
    recorder: tuple[Recorder, str, str], pki: DevPki
) -> None:
    # The README's form: the token stays out of grpcurl's command line (and the process list).
    servicer, tls_target, _ = recorder
    proto = Path(__file__).resolve().parents[2] / "proto"
    done = subprocess.run(
        [
            GRPCURL, "-cacert", str(pki.ca_file),
            "-expand-headers", "-H", "authorization: Bearer ${AGENTRT_TOKEN}",
            "-import-path", str(proto), "-proto", "agentrt/runtime/v1/runtime_service.proto",
            "-d", '{"run_id": "r1"}', tls_target, "agentrt.runtime.v1.AgentRuntimeService/GetRun",
        ],
        capture_output=True, text=True, timeout=60, env=dict(os.environ, AGENTRT_TOKEN=TOKEN),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert servicer.authorization == [f"Bearer {TOKEN}"]
