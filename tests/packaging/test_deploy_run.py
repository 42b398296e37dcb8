"""The deploy files, run: a real tool host with the deploy flags and a real runtime with
deploy/config/runtime.toml on PostgreSQL, with the secrets deploy/compose/init-secrets.sh makes,
mounted where compose mounts them, complete a run over mTLS and answer the deploy healthchecks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentrt.client import Client, cli
from agentrt.proto.runtime.v1 import run_pb2
from agentrt.testing import spawn_runtime, spawn_tool_host

from . import deploy_files as deploy
from .deploy_files import (
    COMPOSE,
    ETC,
    RUNTIME_TOML,
)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What deploy/compose/init-secrets.sh writes into the agentrt-secrets volume."""
    return deploy.make_secrets(tmp_path_factory.mktemp("deploy") / "secrets")


@pytest.mark.postgres
def test_a_runtime_and_tool_host_on_the_deploy_files_complete_a_run_over_mtls(
    compose: dict[str, Any],
    secrets: Path,
    pg_url: str,
    pg_database: str,
    redis_url: str,
    redis_prefix: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    runtime_etc = deploy.mounted(compose, "runtime-1", secrets, tmp_path / "runtime-etc")
    toolhost_etc = deploy.mounted(compose, "toolhost-1", secrets, tmp_path / "toolhost-etc")
    # The deploy flags, but on free loopback ports and a scratch data dir (listen/data-dir first,
    # from spawn_tool_host; argparse keeps the last).
    local = {"--listen", "--data-dir", "--metrics-listen"}
    flags = [
        f.replace(ETC, f"{toolhost_etc}/")
        for f in deploy.canonical_toolhost_flags()
        if f.split("=")[0] not in local
    ]
    # The pool's shared ledger comes from the environment, as compose and k8s give it.
    assert "AGENTRT_TOOLHOST_LEDGER_URL" in compose["x-toolhost"]["environment"]
    ledger = ["--ledger-url", pg_database, "--ledger-schema", f"t_{uuid.uuid4().hex[:12]}"]
    with spawn_tool_host(
        tmp_path / "toolhost-data",
        plugins=["agentrt.plugins.demo_tools"],
        extra_args=[*flags, "--metrics-listen=127.0.0.1:0", *ledger],
    ) as host:
        probe = compose["services"]["toolhost-1"]["healthcheck"]["test"][1:]
        assert _run_cli(capsys, deploy.retarget(probe, host.address, toolhost_etc)) == (0, "SERVING")
        # The config as mounted: the same text, its /etc/agentrt paths where the mounts are.
        config = tmp_path / "runtime.toml"
        text = RUNTIME_TOML.read_text().replace(ETC, f"{runtime_etc}/")
        config.write_text(text.replace('address = "agentrt-toolhost:50061"', f'address = "{host.address}"'))
        assert tomllib.loads(config.read_text())["tool_hosts"][0]["server_name"] == "agentrt-toolhost"
        env = {**os.environ, "AGENTRT_DB_URL": pg_url, "AGENTRT_DATA_DIR": str(tmp_path / "runtime-data")}
        env |= {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}
        # The [redis] of the file, pointed at this machine's Redis as a cluster's env does it.
        assert tomllib.loads(config.read_text())["redis"]["url"] == "redis://redis:6379/0"
        env |= {"AGENTRT_REDIS__URL": redis_url, "AGENTRT_REDIS__KEY_PREFIX": redis_prefix}
        # The assistant agent's key, checked at start; the scripted agent below never uses it.
        env["OPENAI_API_KEY"] = "not-used-by-the-scripted-agent"
        # The servers run with migrate = "check": the schema first, as the migration Job does it.
        job = compose["services"]["migrate"]["entrypoint"]
        assert job[:3] == ["agentrt", "migrate", "upgrade"]
        agentrt = str(Path(sys.executable).with_name("agentrt"))
        check = [agentrt, "migrate", "check", "--config", str(config)]
        assert subprocess.run(check, env=env, capture_output=True, timeout=120).returncode == 1
        migrated = subprocess.run(
            [agentrt, *job[1:-1], str(config)], env=env, capture_output=True, text=True, timeout=120
        )
        assert migrated.returncode == 0, migrated.stderr
        assert subprocess.run(check, env=env, capture_output=True, timeout=120).returncode == 0
        args = ["--config", str(config), "--listen", "127.0.0.1:0"]
        with spawn_runtime(args, cwd=tmp_path, env=env) as runtime:
            probe = compose["services"]["runtime-1"]["healthcheck"]["test"][1:]
            assert _run_cli(capsys, deploy.retarget(probe, runtime.address, runtime_etc)) == (
                0,
                "SERVING",
            )
            tls = secrets / "tls"
            with Client(
                runtime.address,
                ca_file=str(tls / "ca.pem"),
                token_file=str(secrets / "client" / "admin.token"),
                server_name="agentrt-runtime",
                timeout=10,
            ) as client:
                stream = client.run_agent("refund-demo", "refund order A100", timeout=60)
                with stream:
                    run_id = next(iter(stream)).run_id
                    for _ in stream:
                        pass
                if stream.ended is None:
                    # The demo refund policy (installed here, not in the runtime image) asks a person
                    # first: the admin token approves, as an operator would.
                    run = client.get_run(run_id)
                    pending = run.pending_approval
                    assert pending.tool == "refund.issue", run
                    client.resolve_approval(
                        run_id,
                        pending.approval_id,
                        approve=True,
                        args_hash=pending.args_hash,
                        expected_revision=run.revision,
                    )
                    stream = client.stream_events(run_id, after_seq=stream.last_seq, follow=True, timeout=60)
                    with stream:
                        for _ in stream:
                            pass
                assert stream.ended is not None
                assert stream.ended.phase == run_pb2.RUN_PHASE_COMPLETED, stream.ended


def _run_cli(capsys: pytest.CaptureFixture[str], command: list[str]) -> tuple[int, str]:
    assert command[0] == "agentrt"
    capsys.readouterr()
    code = cli.main(command[1:])
    return code, capsys.readouterr().out.strip()
