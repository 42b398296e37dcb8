"""``agentrt auth dev-pki DIR``: a throwaway PKI and grant key pair, to try agentrt over mTLS.

Writes a CA, one server certificate (for 127.0.0.1 and localhost unless ``--host`` says
otherwise; the runtime and a tool host on one machine can share it), a client certificate per
``--client`` (``agentrt-runtime``, the runtime's certificate towards its tool hosts, is always
made) and an Ed25519 grant signing key with its public key. Every file is 0600; existing files
are replaced only with ``--force``, and a refusal writes nothing. Not for production: one CA
key signs everything and lives beside the certificates.

The helpers live in ``agentrt.toolhost.security`` (distribution agentrt-toolhost), imported
only when the command runs: the client installs without it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

RUNTIME_CLIENT: Final = "agentrt-runtime"
"""The client certificate the runtime presents to its tool hosts."""
DEFAULT_HOSTS: Final = ("127.0.0.1", "localhost")
GRANT_KEY_FILE: Final = "grant.key"
GRANT_PUBLIC_KEY_FILE: Final = "grant.pub"
MAX_DAYS: Final = 3650


def add_dev_pki_command(auth_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``dev-pki`` to the ``agentrt auth`` commands."""
    p = auth_sub.add_parser(
        "dev-pki",
        help="write a throwaway CA, certificates and grant key pair, to try TLS and mTLS locally",
        description=(
            "Writes into DIR a CA (ca.pem, ca.key), a server certificate (server.pem, server.key) "
            "for the --host names, a client certificate per --client (agentrt-runtime.pem/.key, the "
            "runtime's towards its tool hosts, always), and a grant signing key pair (grant.key, "
            "grant.pub). Every file is 0600. Refuses to replace existing files unless --force. "
            "For development only; see the README's 'Running it securely'."
        ),
    )
    p.add_argument("directory", metavar="DIR", help="where to write the files (made 0700 if new)")
    p.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="NAME",
        help="name or IP address in the server certificate (repeatable; default 127.0.0.1 and localhost)",
    )
    p.add_argument(
        "--client",
        action="append",
        default=[],
        metavar="NAME",
        help="a client certificate CN=NAME (repeatable)",
    )
    p.add_argument("--days", type=_days, default=30, help="validity of the certificates (default 30)")
    p.add_argument("--force", action="store_true", help="replace files that exist")
    # SUPPRESS: the global --json (before `auth`) and this one fill the same field.
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="list the files as JSON")
    p.set_defaults(func=_run)


def _days(text: str) -> int:
    value = int(text)
    if not 1 <= value <= MAX_DAYS:
        raise argparse.ArgumentTypeError(f"must be 1 to {MAX_DAYS}: {text}")
    return value


def _run(ns: argparse.Namespace) -> int:
    return dev_pki_command(
        directory=ns.directory,
        hosts=ns.host,
        clients=ns.client,
        days=ns.days,
        force=ns.force,
        json_output=ns.json,
    )


def dev_pki_command(
    *,
    directory: str,
    hosts: Sequence[str],
    clients: Sequence[str],
    days: int,
    force: bool,
    json_output: bool,
) -> int:
    """Runs ``agentrt auth dev-pki``: writes the files, then lists them on stdout.

    Returns:
        0 when written; 2 when a file exists (without ``force``), a name is unusable or
        agentrt-toolhost is not installed, with ``error: ...`` on stderr.
    """
    try:
        from agentrt.toolhost import security
    except ImportError as exc:
        print(f"error: dev-pki needs agentrt-toolhost ({exc}); pip install agentrt-toolhost", file=sys.stderr)
        return 2
    root = Path(directory)
    server_names = tuple(hosts) or DEFAULT_HOSTS
    names = list(dict.fromkeys([RUNTIME_CLIENT, *clients]))
    grant_key, grant_pub = root / GRANT_KEY_FILE, root / GRANT_PUBLIC_KEY_FILE
    try:
        files = [*security.dev_pki_paths(root, clients=names).files(), grant_key, grant_pub]
    except ValueError as exc:
        print(f"error: dev-pki: {exc}", file=sys.stderr)
        return 2
    taken = [str(p) for p in files if os.path.lexists(p)]
    if taken and not force:
        print(
            f"error: dev-pki would overwrite {', '.join(taken)}; pass --force to replace them",
            file=sys.stderr,
        )
        return 2
    try:
        pki = security.generate_dev_pki(root, hosts=server_names, clients=names, days=days, overwrite=force)
    except (ValueError, OSError) as exc:  # FileExistsError: one made meanwhile
        print(f"error: dev-pki: {exc}", file=sys.stderr)
        return 2
    for path in (grant_key, grant_pub):
        if os.path.lexists(path):  # with --force only, checked above
            os.unlink(path)
    key = security.write_signing_key(grant_key)
    fd = os.open(grant_pub, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(security.public_key_pem(key))
    listing: dict[str, object] = {
        "ca_file": str(pki.ca_file),
        "ca_key_file": str(pki.ca_key_file),
        "server_cert_file": str(pki.server_cert_file),
        "server_key_file": str(pki.server_key_file),
        "clients": {
            name: {"cert_file": str(cert), "key_file": str(key_file)}
            for name, (cert, key_file) in pki.client_files.items()
        },
        "grant_key_file": str(grant_key),
        "grant_public_key_file": str(grant_pub),
    }
    if json_output:
        print(json.dumps(listing, sort_keys=True))
        return 0
    lines = [
        f"wrote a development PKI in {root} (valid {days} days, files 0600; not for production):",
        f"  {pki.ca_file}  the CA: servers and clients trust it",
        f"  {pki.ca_key_file}  the CA's key: signs more certificates; keep it private or delete it",
        f"  {pki.server_cert_file} {pki.server_key_file}  server certificate for {', '.join(server_names)}",
    ]
    lines += [
        f"  {cert} {key_file}  client certificate CN={name}"
        for name, (cert, key_file) in pki.client_files.items()
    ]
    lines += [
        f"  {grant_key}  grant signing key: the runtime's [grants] signing_key_file",
        f"  {grant_pub}  its public key: the tool host's --grant-keys",
    ]
    print("\n".join(lines))
    return 0
