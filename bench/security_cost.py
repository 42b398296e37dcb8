"""What the trust boundary costs per step: the step-loop workload with security off and on.

Off: plaintext everywhere, loopback trust, no call grants. On: the runtime API over TLS with a
bearer token checked on every call, mTLS from the runtime to the tool host, and a call grant
signed by the runtime and verified by the host on every tool call (optionally ``--encrypt``:
payloads sealed at rest too). Same scripted agent as ``step_loop.py`` (K no-op tool calls in a
real tool host process), SQLite, one run of each in this process so the two figures share the
machine's state.

Run: ``python bench/security_cost.py`` (``--runs 200 --concurrent 100``). Prints figures; asserts
nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from step_loop import STEPS_PER_RUN, measure, peak_rss_mb, runtime_env  # noqa: E402

from agentrt.testing import spawn_runtime, spawn_tool_host  # noqa: E402
from agentrt.toolhost.security import (  # noqa: E402
    generate_dev_pki,
    public_key_pem,
    write_key_file,
    write_signing_key,
)

TOKEN = "bench-token-0123456789"


@dataclass(frozen=True)
class Result:
    per_step_ms: float
    p50_ms: float
    p99_ms: float
    steps_per_s: float
    rss_mb: float


def secure_material(work: Path, *, encrypt: bool) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """Tool host flags, runtime env overrides and client options for the secured setup."""
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
        "_HOST_TLS": json.dumps({"ca_file": str(hop.ca_file), "cert_file": str(cert), "key_file": str(key)}),
    }
    if encrypt:
        keys = work / "payload-keys.json"
        write_key_file(keys)
        env["AGENTRT_ENCRYPTION__KEY_FILE"] = str(keys)
        host_args += ["--encryption-key-file", str(keys)]
    return host_args, env, {"ca_file": str(api.ca_file), "token": TOKEN}


def bench(work: Path, args: argparse.Namespace, *, secure: bool) -> Result:
    name = "on" if secure else "off"
    host_args: list[str] = []
    extra_env: dict[str, str] = {"AGENTRT_GRANTS__ENABLED": "false"}
    client_options: dict[str, str] = {}
    if secure:
        host_args, extra_env, client_options = secure_material(work / name, encrypt=args.encrypt)
    with spawn_tool_host(
        work / f"host-{name}", plugins=["agentrt.plugins.demo_tools"], extra_args=host_args
    ) as host:
        env = runtime_env(f"sqlite:///{work / f'bench-{name}.sqlite'}", host.address)
        host_tls = json.loads(extra_env.pop("_HOST_TLS", "{}"))
        env["AGENTRT_TOOL_HOSTS"] = json.dumps([{"name": "bench", "address": host.address, **host_tls}])
        env.update(extra_env)
        with spawn_runtime(["--listen", "127.0.0.1:0"], cwd=work, env=env) as runtime:
            sequential, bursts = asyncio.run(
                measure(runtime.address, args.runs, args.concurrent, args.bursts, **client_options)
            )
            rss = peak_rss_mb(runtime.process.pid)
    ordered = sorted(sequential)
    return Result(
        per_step_ms=statistics.mean(sequential) / STEPS_PER_RUN * 1000,
        p50_ms=statistics.median(ordered) * 1000,
        p99_ms=ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
        steps_per_s=statistics.median(args.concurrent * STEPS_PER_RUN / seconds for seconds in bursts),
        rss_mb=rss,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--concurrent", type=int, default=100)
    parser.add_argument("--bursts", type=int, default=3, help="concurrent bursts (the median rate counts)")
    parser.add_argument("--encrypt", action="store_true", help="also seal payloads at rest when on")
    args = parser.parse_args()
    print(
        f"agentrt security cost: SQLite, {STEPS_PER_RUN} steps per run, {args.runs} sequential runs, "
        f"{args.concurrent} concurrent, {os.cpu_count()} cores"
    )
    with tempfile.TemporaryDirectory(prefix="agentrt-bench-sec-") as tmp:
        off = bench(Path(tmp), args, secure=False)
        on = bench(Path(tmp), args, secure=True)
    label = "TLS+token auth, mTLS+grants" + (", encryption at rest" if args.encrypt else "")
    print(f"{'':32} {'off':>10} {'on':>10} {'on/off':>8}")
    for title, a, b in (
        ("per step, sequential (ms)", off.per_step_ms, on.per_step_ms),
        ("run p50 (ms)", off.p50_ms, on.p50_ms),
        ("run p99 (ms)", off.p99_ms, on.p99_ms),
        ("steps/s, concurrent", off.steps_per_s, on.steps_per_s),
        ("runtime peak RSS (MB)", off.rss_mb, on.rss_mb),
    ):
        print(f"{title:32} {a:10.3f} {b:10.3f} {b / a:8.2f}")
    print(f"on = {label}")


if __name__ == "__main__":
    main()
