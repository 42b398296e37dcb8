"""A secured deployment on loopback, as real processes: a runtime serving TLS with bearer-token
auth, signing call grants, talking mTLS to a tool host that trusts only those grants.

One stack per module and database backend (SQLite and PostgreSQL); tests share it but each
works on runs of its own, so they stay independent.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest

from agentrt.client import Client
from agentrt.plugins.demo_tools import count_refunds
from agentrt.testing import RuntimeProcess, ToolHostProcess, spawn_runtime, spawn_tool_host
from agentrt.toolhost.security import (
    DevPki,
    generate_dev_pki,
    public_key_pem,
    write_key_file,
    write_signing_key,
)
from tests.e2e.conftest import agent_toml, toml_value

TOKENS = {
    # name: (tenant, roles)
    "alice": ("acme", ["runner"]),
    "bob": ("acme", ["approver"]),
    "ops": ("acme", ["operator"]),
    "carol": ("globex", ["runner", "approver", "operator"]),
    "dave": ("acme", ["runner"]),  # another runner of alice's tenant
    "erin": ("acme", ["runner", "approver"]),  # starts runs and approves calls
}

REFUND_STEPS = [
    {"text": "checking", "tool_calls": [{"tool": "orders.lookup", "arguments": {"order_id": "A100"}}]},
    {
        "text": "refunding",
        "tool_calls": [
            {"tool": "refund.issue", "arguments": {"order_id": "A100", "amount": 30.0, "reason": "broken"}}
        ],
    },
    {"text": "Handled the refund request."},
]
SMALL_REFUND_STEPS = [
    {
        "text": "refunding",
        "tool_calls": [
            {"tool": "refund.issue", "arguments": {"order_id": "A100", "amount": 5.0, "reason": "broken"}}
        ],
    },
    {"text": "Refunded 5.00."},
]
SNEAKY_STEPS = [
    {
        "text": "I will refund anyway",
        "tool_calls": [
            {"tool": "refund.issue", "arguments": {"order_id": "A100", "amount": 5.0, "reason": "sneaky"}}
        ],
    },
    {
        "text": "I could not refund; echoing instead.",
        "tool_calls": [{"tool": "noop.echo", "arguments": {"text": "hi"}}],
    },
    {"text": "Done without a refund."},
]


@dataclass
class SecureStack:
    """The processes and the material a client needs; ``client(name)`` speaks TLS with a token."""

    runtime: RuntimeProcess
    host: ToolHostProcess
    api_pki: DevPki
    host_pki: DevPki
    grant_key: Path
    grant_public: Path
    tokens: dict[str, str]
    config_path: Path
    db_url: str

    def client(self, who: str | None, **options: Any) -> Client:
        token = self.tokens[who] if who is not None else None
        return Client(
            self.runtime.address, ca_file=str(self.api_pki.ca_file), token=token, timeout=20, **options
        )

    def metadata(self, who: str) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {self.tokens[who]}")]

    def channel(self) -> grpc.Channel:
        """A TLS channel to the runtime with no credential of its own."""
        creds = grpc.ssl_channel_credentials(root_certificates=self.api_pki.ca_file.read_bytes())
        return grpc.secure_channel(self.runtime.address, creds)

    def host_channel(self, *, client_cert: bool = True) -> grpc.Channel:
        """An mTLS channel to the tool host, as a holder of a certificate from its CA would open it."""
        cert, key = self.host_pki.client_files["agentrt-runtime"]
        creds = grpc.ssl_channel_credentials(
            root_certificates=self.host_pki.ca_file.read_bytes(),
            private_key=key.read_bytes() if client_cert else None,
            certificate_chain=cert.read_bytes() if client_cert else None,
        )
        return grpc.secure_channel(self.host.address, creds)

    def refunds(self) -> int:
        path = self.host.data_dir / "refunds.sqlite"
        return count_refunds(path) if path.exists() else 0


def write_tokens(path: Path) -> dict[str, str]:
    import hashlib

    tokens = {name: f"tok-{name}-{uuid.uuid4().hex}" for name in TOKENS}
    text = ""
    for name, (tenant, roles) in TOKENS.items():
        digest = hashlib.sha256(tokens[name].encode()).hexdigest()
        text += (
            f'[[tokens]]\nsha256 = "{digest}"\nsubject = "{name}"\ntenant = "{tenant}"\n'
            f"roles = {toml_value(roles)}\n"
        )
    path.write_text(text)
    return tokens


def host_args(host_pki: DevPki, grant_public: Path) -> list[str]:
    return [
        "--tls-cert",
        str(host_pki.server_cert_file),
        "--tls-key",
        str(host_pki.server_key_file),
        "--client-ca",
        str(host_pki.ca_file),
        "--grant-keys",
        str(grant_public),
    ]


def runtime_config(
    path: Path,
    *,
    db_url: str,
    host: ToolHostProcess,
    api_pki: DevPki,
    host_pki: DevPki,
    tokens_file: Path,
    grant_key: Path,
    extra: str = "",
    auth_extra: str = "",
) -> Path:
    cert, key = host_pki.client_files["agentrt-runtime"]
    text = (
        f'db_url = "{db_url}"\nlisten = "127.0.0.1:0"\npoll_interval_s = 0.1\nlease_ttl_s = 3.0\n'
        f"grace_s = 1.0\n"
        f'[tls]\ncert_file = "{api_pki.server_cert_file}"\nkey_file = "{api_pki.server_key_file}"\n'
        f'[auth]\ntokens_file = "{tokens_file}"\n{auth_extra}'
        f'[grants]\nsigning_key_file = "{grant_key}"\n'
        f'[[tool_hosts]]\nname = "secure"\naddress = "{host.address}"\nca_file = "{host_pki.ca_file}"\n'
        f'cert_file = "{cert}"\nkey_file = "{key}"\n'
        '[model_profiles.scripted]\nprovider = "scripted"\ninline_options = ["steps"]\n'
        '[inline_agents]\nenabled = true\nroles = ["runner"]\ntools = ["orders.lookup", "noop.echo"]\n'
    )
    text += extra
    text += agent_toml(
        "refunder", steps=REFUND_STEPS, tools=["orders.lookup", "refund.issue"], budgets={"timeout_s": 60}
    )
    text += agent_toml(
        "small-refund", steps=SMALL_REFUND_STEPS, tools=["refund.issue"], budgets={"timeout_s": 60}
    )
    text += agent_toml("echo-only", steps=SNEAKY_STEPS, tools=["noop.echo"], budgets={"timeout_s": 60})
    path.write_text(text)
    return path


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def stack_db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('db') / 'agentrt.sqlite'}"
        return
    database = request.getfixturevalue("pg_database")
    schema = f"sec_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    yield f"{database}?options=-csearch_path%3D{schema}"


@contextlib.contextmanager
def secure_stack(
    root: Path,
    db_url: str,
    *,
    extra_config: str = "",
    auth_config: str = "",
    encryption: bool = False,
) -> Iterator[SecureStack]:
    """Start the tool host and the runtime with fresh PKIs, tokens and grant key under ``root``.

    ``auth_config`` is TOML added to the runtime's ``[auth]`` table, ``extra_config`` after it.
    """
    api_pki = generate_dev_pki(root / "api-pki", clients=["alice-cert"])
    host_pki = generate_dev_pki(root / "host-pki", clients=["agentrt-runtime"])
    grant_key = root / "grant.key"
    grant_public = root / "grant.pub"
    grant_public.write_bytes(public_key_pem(write_signing_key(grant_key)))
    tokens_file = root / "tokens.toml"
    tokens = write_tokens(tokens_file)
    host_extra = host_args(host_pki, grant_public)
    if encryption:
        key_file = root / "payload-keys.json"
        write_key_file(key_file)
        extra_config += f'[encryption]\nkey_file = "{key_file}"\n'
        host_extra += ["--encryption-key-file", str(key_file)]
    with spawn_tool_host(
        root / "toolhost", plugins=["agentrt.plugins.demo_tools"], extra_args=host_extra
    ) as host:
        config = runtime_config(
            root / "agentrt.toml",
            db_url=db_url,
            host=host,
            api_pki=api_pki,
            host_pki=host_pki,
            tokens_file=tokens_file,
            grant_key=grant_key,
            extra=extra_config,
            auth_extra=auth_config,
        )
        with spawn_runtime(["--config", str(config)], cwd=root) as runtime:
            yield SecureStack(
                runtime=runtime,
                host=host,
                api_pki=api_pki,
                host_pki=host_pki,
                grant_key=grant_key,
                grant_public=grant_public,
                tokens=tokens,
                config_path=config,
                db_url=db_url,
            )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, stack_db_url: str) -> Iterator[SecureStack]:
    with secure_stack(tmp_path_factory.mktemp("secure"), stack_db_url) as running:
        yield running
