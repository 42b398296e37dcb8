"""The README's "Running it securely" walk-through: `agentrt auth dev-pki`, then a runtime and a tool
host over mTLS with call grants, driven by a client that shows a certificate.

Real processes throughout: the CLI makes the files, the tool host and the runtime read them, and
the runtime's configuration is the README's own ``secure.toml`` (ports aside).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentrt.client import Client, RPCError, event_type
from agentrt.plugins.demo_tools import count_refunds
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import spawn_runtime, spawn_tool_host
from agentrt.toolhost.security import generate_dev_pki

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_secure_toml() -> str:
    found = re.search(r"```toml\n# secure\.toml\n(.*?)```", README.read_text(), re.DOTALL)
    assert found is not None, "the README's secure.toml block"
    return found.group(1)


def dev_pki(directory: Path, *argv: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "agentrt.client", "auth", "dev-pki", str(directory), *argv, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    listing: dict[str, Any] = json.loads(done.stdout)
    return listing


def test_the_readme_walk_through_runs_a_refund_over_mtls_with_dev_pki_files(tmp_path: Path) -> None:
    pki = dev_pki(tmp_path / "pki", "--client", "alice")
    alice = pki["clients"]["alice"]
    with spawn_tool_host(
        tmp_path / "toolhost",
        plugins=["agentrt.plugins.demo_tools"],
        tls_cert=pki["server_cert_file"],
        tls_key=pki["server_key_file"],
        client_ca=pki["ca_file"],
        grant_keys=pki["grant_public_key_file"],
    ) as host:
        toml = readme_secure_toml()
        assert '"127.0.0.1:50061"' in toml
        (tmp_path / "secure.toml").write_text(toml.replace('"127.0.0.1:50061"', f'"{host.address}"'))
        args = ["--demo", "--config", "secure.toml", "--listen", "127.0.0.1:0"]
        with spawn_runtime(args, cwd=tmp_path) as runtime:
            credentials = {
                "ca_file": pki["ca_file"],
                "cert_file": alice["cert_file"],
                "key_file": alice["key_file"],
            }
            with Client(runtime.address, **credentials) as client:
                events = [
                    e for e in client.run_agent("refund-demo", "Refund order A100.", timeout=60) if e.seq
                ]
                assert events[0].run_started.started_by == "CN=alice"
                pending = events[-1].approval_requested
                run_id = events[0].run_id
                run = client.get_run(run_id)
                assert run.phase == run_pb2.RUN_PHASE_WAITING_APPROVAL
                client.resolve_approval(
                    run_id,
                    pending.approval_id,
                    approve=True,
                    args_hash=pending.args_hash,
                    expected_revision=run.revision,
                )
                tail = list(client.stream_events(run_id, after_seq=len(events), follow=True, timeout=60))
            assert [event_type(e) for e in tail if e.seq][-1] == "run.ended"
            assert tail[-1].run_ended.phase == run_pb2.RUN_PHASE_COMPLETED, tail[-1]
            assert count_refunds(host.data_dir) == 1
            # Without a certificate of this CA nobody gets in.
            stranger = generate_dev_pki(tmp_path / "stranger", clients=["alice"])
            cert, key = stranger.client_files["alice"]
            for other in (
                {"ca_file": pki["ca_file"]},
                {**credentials, "cert_file": str(cert), "key_file": str(key)},
            ):
                with Client(runtime.address, **other) as client, pytest.raises(RPCError) as info:
                    client.get_run(run_id)
                assert info.value.code == grpc.StatusCode.UNAVAILABLE
