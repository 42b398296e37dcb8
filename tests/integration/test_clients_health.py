"""``agentrt health``: the container healthcheck, against a real tool host serving mTLS."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health as health_service
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentrt.client import cli
from agentrt.testing import ToolHostProcess, spawn_tool_host


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("health") / "pki"
    # The names deploy/ uses: the server certificate carries agentrt-toolhost, the probe has its own.
    code = cli.main(["auth", "dev-pki", str(directory), "--host", "agentrt-toolhost", "--client", "probe"])
    assert code == 0
    return directory


@pytest.fixture(scope="module")
def host(pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolHostProcess]:
    with spawn_tool_host(
        tmp_path_factory.mktemp("health-host"),
        tls_cert=pki / "server.pem",
        tls_key=pki / "server.key",
        client_ca=pki / "ca.pem",
        grant_keys=pki / "grant.pub",
    ) as process:
        yield process


def health(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["health", *argv])
    captured = capsys.readouterr()
    return code, captured.out.strip(), captured.err.strip()


def tls(pki: Path, *, client: bool = True) -> list[str]:
    args = ["--ca", str(pki / "ca.pem"), "--server-name", "agentrt-toolhost"]
    return args + (["--cert", str(pki / "probe.pem"), "--key", str(pki / "probe.key")] if client else [])


def test_a_serving_host_answers_serving_over_mtls(
    host: ToolHostProcess, pki: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert health(capsys, "--target", host.address, *tls(pki)) == (0, "SERVING", "")


def test_the_tool_host_service_by_name_is_serving_too(
    host: ToolHostProcess, pki: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--target", host.address, *tls(pki), "--service", "agentrt.toolhost.v1.ToolHostService"]
    assert health(capsys, *args) == (0, "SERVING", "")


def test_an_unknown_service_exits_1(
    host: ToolHostProcess, pki: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = health(capsys, "--target", host.address, *tls(pki), "--service", "no.such.Service")
    assert (code, out) == (1, "SERVICE_UNKNOWN")


def test_without_a_client_certificate_the_mtls_host_refuses_the_probe(
    host: ToolHostProcess, pki: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = health(capsys, "--target", host.address, *tls(pki, client=False), "--timeout", "3")
    assert (code, out) == (2, "")
    assert err == f"error: {host.address}: UNAVAILABLE"


def test_a_plaintext_probe_of_the_tls_port_fails(
    host: ToolHostProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = health(capsys, "--target", host.address, "--timeout", "3")
    assert code == 2 and err.startswith(f"error: {host.address}: ")


def test_nothing_listening_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:  # a port that was free a moment ago, and closed
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    code, out, err = health(capsys, "--target", address, "--timeout", "2")
    assert (code, out) == (2, "")
    assert err.startswith(f"error: {address}: ") and err.split(": ")[-1] in {
        "UNAVAILABLE",
        "DEADLINE_EXCEEDED",
    }


def test_unusable_credentials_exit_2_and_name_the_problem(
    pki: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = health(capsys, "--target", "127.0.0.1:1", "--cert", str(pki / "probe.pem"))
    assert code == 2
    assert "needs its key too" in err and "BEGIN" not in err


@pytest.fixture
def health_server() -> Iterator[tuple[str, health_service.HealthServicer]]:
    """A real gRPC server on a free loopback port serving only the library's health servicer."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health_service.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", servicer
    finally:
        server.stop(grace=None)


def test_a_draining_server_answers_not_serving_and_exits_1(
    health_server: tuple[str, health_service.HealthServicer], capsys: pytest.CaptureFixture[str]
) -> None:
    address, servicer = health_server
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    assert health(capsys, "--target", address) == (0, "SERVING", "")
    # What a runtime or tool host reports from SIGTERM on (enter_graceful_shutdown).
    servicer.enter_graceful_shutdown()
    assert health(capsys, "--target", address) == (1, "NOT_SERVING", "")


def test_without_grpcio_health_checking_it_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # As in a venv holding agentrt-client alone: the health messages cannot be imported.
    monkeypatch.setitem(sys.modules, "grpc_health.v1", None)
    code, out, err = health(capsys, "--target", "127.0.0.1:1")
    assert (code, out) == (2, "")
    assert err == "error: agentrt health needs grpcio-health-checking: pip install grpcio-health-checking"
