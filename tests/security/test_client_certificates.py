"""Callers identified by client certificates (mTLS on the runtime API), mapped to principals by config."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from agentrt.client import Client, RPCError, event_type
from agentrt.testing import spawn_runtime, spawn_tool_host
from agentrt.toolhost.security import generate_dev_pki
from tests.e2e.conftest import agent_toml
from tests.security.conftest import SMALL_REFUND_STEPS


def test_client_certificates_map_to_principals_and_unmapped_ones_are_refused(tmp_path: Path) -> None:
    pki = generate_dev_pki(tmp_path / "pki", clients=["billing", "stranger"])
    config = tmp_path / "agentrt.toml"
    with spawn_tool_host(tmp_path / "host", plugins=["agentrt.plugins.demo_tools"]) as host:
        config.write_text(
            f'db_url = "sqlite:///{tmp_path / "a.sqlite"}"\nlisten = "127.0.0.1:0"\npoll_interval_s = 0.1\n'
            f'[tls]\ncert_file = "{pki.server_cert_file}"\nkey_file = "{pki.server_key_file}"\n'
            f'client_ca_file = "{pki.ca_file}"\n'
            '[auth.mtls."CN=billing"]\ntenant = "acme"\nroles = ["runner"]\nsubject = "billing-service"\n'
            f'[[tool_hosts]]\nname = "local"\naddress = "{host.address}"\n'
            + agent_toml("small-refund", steps=SMALL_REFUND_STEPS, tools=["refund.issue"], budgets={})
        )
        with spawn_runtime(["--config", str(config)], cwd=tmp_path) as runtime:

            def client(name: str | None) -> Client:
                cert, key = pki.client_files[name] if name else (None, None)
                return Client(
                    runtime.address,
                    ca_file=str(pki.ca_file),
                    cert_file=str(cert) if cert else None,
                    key_file=str(key) if key else None,
                    timeout=20,
                )

            with client("billing") as billing:
                events = [e for e in billing.run_agent("small-refund", "refund A100", timeout=60) if e.seq]
                assert (
                    event_type(events[-1]) == "run.ended"
                    and events[0].run_started.started_by == "billing-service"
                )
                run = billing.get_run(events[0].run_id)
                assert (run.tenant_id, run.created_by) == ("acme", "billing-service")
            with client("stranger") as stranger:  # a valid certificate that no mapping names
                with pytest.raises(RPCError) as info:
                    stranger.list_runs()
                assert info.value.code == grpc.StatusCode.UNAUTHENTICATED
                assert info.value.reason == "UNKNOWN_CLIENT_CERTIFICATE"
            with client(None) as anonymous:  # no certificate: the handshake itself fails
                with pytest.raises(RPCError) as info:
                    anonymous.list_runs()
                assert info.value.code == grpc.StatusCode.UNAVAILABLE
