"""Secure by default: off loopback, both servers refuse to listen without TLS and authentication
unless told ``--insecure`` (which they log loudly); on loopback the demo needs no setup."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentrt.client import Client
from agentrt.testing import spawn_runtime, spawn_tool_host, start_tool_host
from agentrt.toolhost.security import generate_dev_pki
from tests.security.conftest import write_tokens

ROOT = Path(__file__).resolve().parents[2]


def run_module(module: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


def test_runtime_refuses_a_non_loopback_listen_without_tls_and_auth(tmp_path: Path) -> None:
    db = tmp_path / "never.sqlite"
    done = run_module("agentrt.server", "--listen", "0.0.0.0:0", "--db-url", f"sqlite:///{db}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "refusing to listen on 0.0.0.0:0" in done.stderr and "--insecure" in done.stderr
    assert not db.exists()  # refused before touching the database
    pki = generate_dev_pki(tmp_path / "pki")
    tls_only = tmp_path / "tls.toml"
    tls_only.write_text(
        f'db_url = "sqlite:///{db}"\n[tls]\ncert_file = "{pki.server_cert_file}"\n'
        f'key_file = "{pki.server_key_file}"\n'
    )
    done = run_module("agentrt.server", "--config", str(tls_only), "--listen", "0.0.0.0:0", cwd=tmp_path)
    assert done.returncode == 2 and "refusing" in done.stderr  # TLS alone is not enough


def test_runtime_with_insecure_starts_and_says_so_loudly(tmp_path: Path) -> None:
    args = ["--listen", "0.0.0.0:0", "--db-url", f"sqlite:///{tmp_path / 'a.sqlite'}", "--insecure"]
    with spawn_runtime(args, cwd=tmp_path) as runtime:
        port = runtime.address.rpartition(":")[2]
        with Client(f"127.0.0.1:{port}") as client:
            assert client.list_runs().runs == []
        assert "INSECURE" in runtime.stderr_text()


def test_runtime_with_tls_and_auth_may_listen_anywhere(tmp_path: Path) -> None:
    pki = generate_dev_pki(tmp_path / "pki")
    tokens = write_tokens(tmp_path / "tokens.toml")
    config = tmp_path / "secure.toml"
    config.write_text(
        f'db_url = "sqlite:///{tmp_path / "s.sqlite"}"\nlisten = "0.0.0.0:0"\n'
        f'[tls]\ncert_file = "{pki.server_cert_file}"\nkey_file = "{pki.server_key_file}"\n'
        f'[auth]\ntokens_file = "{tmp_path / "tokens.toml"}"\n'
    )
    with spawn_runtime(["--config", str(config)], cwd=tmp_path) as runtime:
        port = runtime.address.rpartition(":")[2]
        with Client(f"127.0.0.1:{port}", ca_file=str(pki.ca_file), token=tokens["alice"]) as client:
            assert client.list_runs().runs == []
        assert "INSECURE" not in runtime.stderr_text()


def test_tool_host_refuses_a_non_loopback_listen_without_tls_and_grants(tmp_path: Path) -> None:
    done = run_module(
        "agentrt.toolhost",
        "--listen",
        "0.0.0.0:0",
        "--no-entrypoints",
        "--data-dir",
        str(tmp_path / "h"),
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert "--insecure" in done.stderr
    assert not (tmp_path / "h" / "ledger.sqlite").exists()
    host = start_tool_host(
        tmp_path / "h2", listen="0.0.0.0:0", extra_args=["--insecure"], plugins=["agentrt.plugins.demo_tools"]
    )
    try:
        assert host.address.startswith("0.0.0.0:") and "INSECURE" in host.stderr_text().upper()
    finally:
        host.stop()
    # TLS without the client CA is refused at start.
    with (
        pytest.raises(RuntimeError),
        spawn_tool_host(tmp_path / "h3", extra_args=["--tls-cert", "x", "--tls-key", "y"]),
    ):
        pass
