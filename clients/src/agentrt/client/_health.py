"""``agentrt health``: ask a runtime or tool host for its gRPC health, for container healthchecks.

Kubernetes' ``grpc:`` probes and ``grpc_health_probe`` speak plaintext, but agentrt serves TLS
(mTLS on tool hosts) off loopback; this command connects with the CLI's usual TLS options
(``--ca``, ``--cert``, ``--key``, ``--server-name``, or their ``AGENTRT_*`` variables), so the
probe goes through the same port and certificates as real callers.

Exit codes: 0 SERVING; 1 any other status (NOT_SERVING while draining, SERVICE_UNKNOWN);
2 unreachable, deadline passed or unusable credentials (``error: ...`` on stderr).

The health messages come from ``grpcio-health-checking``, a dependency of agentrt-server and
agentrt-toolhost (the images this probe runs in), imported only when the command runs: the
client installs without it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Final

import grpc

from agentrt.client._credentials import resolve_security
from agentrt.client._errors import CredentialsError

EXIT_SERVING: Final = 0
EXIT_NOT_SERVING: Final = 1
EXIT_ERROR: Final = 2
HEALTH_MISSING: Final = "agentrt health needs grpcio-health-checking: pip install grpcio-health-checking"


def add_health_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Adds ``health`` to the ``agentrt`` commands."""
    p = sub.add_parser(
        "health",
        parents=[common],
        help="check a runtime's or tool host's gRPC health (exit 0 when SERVING)",
        description=(
            "Calls grpc.health.v1.Health/Check on --target with the usual TLS options and prints "
            "the status. Exit 0 SERVING, 1 another status (NOT_SERVING while draining), 2 unreachable."
        ),
    )
    p.add_argument("--service", default="", help='the service to check (default "": the whole server)')
    p.set_defaults(func=_cmd_health)


def _cmd_health(ns: argparse.Namespace) -> int:
    try:
        from grpc_health.v1 import health_pb2, health_pb2_grpc
    except ImportError:
        print(f"error: {HEALTH_MISSING}", file=sys.stderr)
        return EXIT_ERROR
    try:
        security = resolve_security(
            ns.target,
            ca_file=ns.ca,
            cert_file=ns.cert,
            key_file=ns.key,
            token=ns.token,
            token_file=ns.token_file,
            server_name=ns.server_name,
            tls=ns.tls,
        )
    except CredentialsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    credentials = security.channel_credentials()
    options = security.channel_options()
    channel = (
        grpc.secure_channel(ns.target, credentials, options=options)
        if credentials is not None
        else grpc.insecure_channel(ns.target, options=options)
    )
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            response = stub.Check(
                health_pb2.HealthCheckRequest(service=ns.service),
                timeout=ns.timeout,
                metadata=security.call_metadata(),
            )
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
            # NOT_FOUND is the health servicer's answer for a service it does not know.
            if code == grpc.StatusCode.NOT_FOUND:
                print("SERVICE_UNKNOWN")
                return EXIT_NOT_SERVING
            print(f"error: {ns.target}: {code.name}", file=sys.stderr)
            return EXIT_ERROR
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
    print(status)
    return EXIT_SERVING if response.status == health_pb2.HealthCheckResponse.SERVING else EXIT_NOT_SERVING
