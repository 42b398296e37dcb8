"""The step-loop workload, shared by the benchmarks: the scripted agents, one run followed over
RunAgent, and a real tool host plus runtime to serve them, plain or secured.

Secured is what a production user would run: the runtime API over TLS with a bearer token checked
on every call, mTLS from the runtime to the tool host, and a call grant the host verifies on every
tool call (``bench/security_cost.py`` and ``bench/step_loop.py`` both start it from here).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from agentrt.client import AsyncClient
from agentrt.testing import spawn_runtime, spawn_tool_host
from agentrt.toolhost.security import (
    generate_dev_pki,
    public_key_pem,
    write_key_file,
    write_signing_key,
)

K = 5
STEPS_PER_RUN = 2 * K + 1
# The long run of the per-step-cost-at-K check: its per-step cost against K's shows whether a
# step's cost grows with the run's length (request rebuilding, log reads).
LONG_K = 50
WARM_UP_RUNS = 10  # imports, caches, connection pools; counted in CPU per step, not in the timings
PG_ADMIN = os.environ.get("AGENTRT_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
TOKEN = "bench-token-0123456789"


def steps_per_run(k: int) -> int:
    """k tool steps plus k + 1 model steps."""
    return 2 * k + 1


def agent_name(k: int) -> str:
    """The agent making ``k`` tool calls per run (``bench`` is K=5, as it always was)."""
    return "bench" if k == K else f"bench-k{k}"


def agent_config(k: int) -> dict[str, object]:
    """A scripted agent making ``k`` no-op tool calls, then answering; its step budget follows k."""
    steps = [{"tool_calls": [{"tool": "noop.echo", "arguments": {"i": i}}]} for i in range(k)]
    return {
        "tools": ["noop.echo"],
        "model": {"provider": "scripted", "options": {"steps": [*steps, {"text": "done"}]}},
        "budgets": {"max_model_steps": k + 1, "timeout_s": 120},
    }


def runtime_env(
    db_url: str, tool_host: str, *, key_file: Path | None = None, ks: Sequence[int] = (K, LONG_K)
) -> dict[str, str]:
    """The whole runtime config as AGENTRT_* variables (values that parse as JSON are JSON)."""
    env = dict(
        os.environ,
        AGENTRT_DB_URL=db_url,
        AGENTRT_MAX_CONCURRENT_RUNS="512",
        AGENTRT_TOOL_HOSTS=json.dumps([{"name": "bench", "address": tool_host}]),
        AGENTRT_AGENTS=json.dumps({agent_name(k): agent_config(k) for k in ks}),
    )
    if key_file is not None:
        env["AGENTRT_ENCRYPTION__KEY_FILE"] = str(key_file)
    return env


@dataclasses.dataclass(frozen=True)
class Secured:
    """What the secured setup adds: tool host flags, runtime env overrides, client options."""

    host_args: list[str]
    runtime_env: dict[str, str]
    host_tls: dict[str, str]  # the runtime's side of the mTLS hop, in its tool_hosts entry
    ca_file: str
    token: str


def secure_material(work: Path, *, encrypt: bool) -> Secured:
    """Fresh PKIs, a grant key pair and a token file under ``work`` for the secured setup."""
    api = generate_dev_pki(work / "api-pki")
    hop = generate_dev_pki(work / "hop-pki", clients=["agentrt-runtime"])
    grant_key = work / "grant.key"
    grant_pub = work / "grant.pub"
    grant_pub.write_bytes(public_key_pem(write_signing_key(grant_key)))
    tokens = work / "tokens.toml"
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    tokens.write_text(
        f'[[tokens]]\nsha256 = "{digest}"\nsubject = "bench"\ntenant = "default"\nroles = ["runner"]\n'
    )
    host_args = [
        "--tls-cert",
        str(hop.server_cert_file),
        "--tls-key",
        str(hop.server_key_file),
        "--client-ca",
        str(hop.ca_file),
        "--grant-keys",
        str(grant_pub),
    ]
    cert, key = hop.client_files["agentrt-runtime"]
    env = {
        "AGENTRT_TLS__CERT_FILE": str(api.server_cert_file),
        "AGENTRT_TLS__KEY_FILE": str(api.server_key_file),
        "AGENTRT_AUTH__TOKENS_FILE": str(tokens),
        "AGENTRT_GRANTS__SIGNING_KEY_FILE": str(grant_key),
    }
    if encrypt:
        keys = work / "payload-keys.json"
        write_key_file(keys)
        env["AGENTRT_ENCRYPTION__KEY_FILE"] = str(keys)
        host_args += ["--encryption-key-file", str(keys)]
    return Secured(
        host_args=host_args,
        runtime_env=env,
        host_tls={"ca_file": str(hop.ca_file), "cert_file": str(cert), "key_file": str(key)},
        ca_file=str(api.ca_file),
        token=TOKEN,
    )


@dataclasses.dataclass(frozen=True)
class Stack:
    """A serving runtime and tool host: where to call, how, and the pids to read CPU and RSS of."""

    address: str
    runtime_pid: int
    host_pid: int
    ca_file: str | None = None  # the API's TLS and bearer token, when secured
    token: str | None = None

    def client(self, *, timeout: float = 60) -> AsyncClient:
        return AsyncClient(self.address, timeout=timeout, ca_file=self.ca_file, token=self.token)


@contextlib.contextmanager
def _environ(overrides: Mapping[str, str]) -> Iterator[None]:
    """``overrides`` in this process's environment for the block, as it was after."""
    saved = {key: os.environ.get(key) for key in overrides}
    os.environ.update(overrides)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def serving(
    db_url: str,
    work: Path,
    *,
    encrypt: bool = False,
    secure: bool = False,
    otel: Mapping[str, str] | None = None,
    python: str = "",
    extra_env: Mapping[str, str] | None = None,
) -> Iterator[Stack]:
    """A tool host and a runtime on ``db_url`` (run by ``python``, default this interpreter),
    ``secure`` or plaintext with loopback trust; ``otel``: OTEL_* variables for both."""
    tag = uuid.uuid4().hex[:8]
    secured = secure_material(work / f"secure-{tag}", encrypt=encrypt) if secure else None
    key_file = None
    if encrypt and secured is None:
        key_file = work / f"keys-{tag}.json"
        write_key_file(key_file)
    # The tool host inherits this process's environment, so OTEL_* reach it (and the runtime's
    # env) by being set here until both have started; what is spawned next starts without them.
    with contextlib.ExitStack() as stack:
        with _environ(otel or {}):
            host = stack.enter_context(
                spawn_tool_host(
                    work / f"host-{tag}",
                    plugins=["agentrt.plugins.demo_tools"],
                    extra_args=secured.host_args if secured else (),
                    python=python,
                )
            )
            env = runtime_env(db_url, host.address, key_file=key_file)
            if secured is not None:
                entry = {"name": "bench", "address": host.address, **secured.host_tls}
                env["AGENTRT_TOOL_HOSTS"] = json.dumps([entry])
                env.update(secured.runtime_env)
            env.update(extra_env or {})
            # As deploy/ runs it: the schema by a one-shot `agentrt migrate upgrade`, then a runtime
            # that only checks it (and so never loads Alembic).
            subprocess.run(
                [python or sys.executable, "-m", "agentrt.client", "migrate", "upgrade", "--db-url", db_url],
                env=env,
                check=True,
                capture_output=True,
                timeout=120,
            )
            env["AGENTRT_MIGRATE"] = "check"
            runtime = stack.enter_context(
                spawn_runtime(["--listen", "127.0.0.1:0"], cwd=work, env=env, python=python)
            )
        yield Stack(
            address=runtime.address,
            runtime_pid=runtime.process.pid,
            host_pid=host.process.pid,
            ca_file=secured.ca_file if secured else None,
            token=secured.token if secured else None,
        )


async def one_run(client: AsyncClient, k: int = K) -> float:
    """Seconds for one run of the K-call agent, start to run.ended, following every event."""
    begun = time.perf_counter()
    last = None
    async for event in client.run_agent(agent_name(k), "go"):
        last = event
    assert last is not None and last.HasField("run_ended") and last.run_ended.phase == 8, last
    return time.perf_counter() - begun


async def measure(stack: Stack, runs: int, concurrent: int, bursts: int) -> tuple[list[float], list[float]]:
    """Per-run seconds of ``runs`` sequential runs, and seconds of each burst of ``concurrent`` runs."""
    async with stack.client() as client:
        for _ in range(WARM_UP_RUNS):
            await one_run(client)
        sequential = [await one_run(client) for _ in range(runs)]
        seconds = []
        for _ in range(bursts):
            begun = time.perf_counter()
            await asyncio.gather(*(one_run(client) for _ in range(concurrent)))
            seconds.append(time.perf_counter() - begun)
    return sequential, seconds


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a live process has used (less sensitive to a noisy box than wall time)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")
