"""Spawns a local tool host child process for the embedded default.

The child's stderr is inherited (its logs land beside the runtime's); stdout is
piped only for the one readiness line.

A spawned host is secured with no setup, whatever ``[grants]`` says (that section is for hosts
at an address): the runtime makes a throwaway PKI (a CA, the host's certificate for 127.0.0.1,
the runtime's client certificate) and a grant key pair of the child's own. The host serves
mTLS and obeys only grants signed by this runtime: the private grant key stays in this
process's memory. What the child reads lives in a private directory made by
``tempfile.mkdtemp`` (0700, files 0600), never in the data dir: the host re-reads its TLS and
grant key files when they change, so another local user who could write there could swap in a
key of their own. The directory is removed when the child stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentrt.server.telemetry import active_format
from agentrt.server.tools._channel import HostTls
from agentrt.toolhost.security import GrantSigner, generate_dev_pki

READY_PREFIX = "agentrt-toolhost listening on "
RUNTIME_CLIENT = "agentrt-runtime"
GRANT_KEYS_FILE = "grant-keys.pem"
SECRETS_PREFIX = "agentrt-toolhost-"


def _private_file(path: Path, data: bytes) -> None:
    # O_EXCL: a name someone planted (a symlink, say) is never followed or reused.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _private_dir(data_dir: Path) -> Path:
    """Make the host's data dir if need be, and a new private directory (0700) for its secrets."""
    data_dir.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=SECRETS_PREFIX))


def _secure(secrets: Path, signer: GrantSigner, encryption_key_file: str) -> tuple[list[str], HostTls]:
    """Write the child's TLS material and trusted grant key into ``secrets``.

    Returns the host's security flags, and the TLS material the runtime connects with.
    """
    pki = generate_dev_pki(secrets, hosts=("127.0.0.1", "localhost"), clients=(RUNTIME_CLIENT,))
    keys_file = secrets / GRANT_KEYS_FILE
    _private_file(keys_file, signer.public_key_pem)
    args = ["--tls-cert", str(pki.server_cert_file), "--tls-key", str(pki.server_key_file)]
    args += ["--client-ca", str(pki.ca_file)]
    # The child takes no grant living longer than ours: a grant is checked as a call arrives.
    args += ["--grant-keys", str(keys_file), "--grant-max-lifetime", str(signer.lifetime_s)]
    if encryption_key_file:
        args += ["--encryption-key-file", encryption_key_file]
    cert, key = pki.client_files[RUNTIME_CLIENT]
    return args, HostTls(ca_file=str(pki.ca_file), cert_file=str(cert), key_file=str(key))


async def _ready_address(process: asyncio.subprocess.Process, timeout_s: float) -> str:
    """The address of the child's readiness line; "" when it exits or stays silent first."""
    assert process.stdout is not None
    try:
        async with asyncio.timeout(timeout_s):
            while line := (await process.stdout.readline()).decode():
                if line.startswith(READY_PREFIX):
                    return line.removeprefix(READY_PREFIX).strip()
    except TimeoutError:
        pass
    return ""


class SpawnedToolHost:
    """A tool host child process.

    ``address`` is where it listens, ``tls`` how to reach it, ``signer`` the only signer of the
    grants it obeys, ``secrets_dir`` the private directory of the files it was given.
    """

    def __init__(
        self,
        *,
        process: asyncio.subprocess.Process,
        address: str,
        tls: HostTls,
        signer: GrantSigner,
        secrets_dir: Path,
    ) -> None:
        self.process = process
        self.address = address
        self.tls = tls
        self.signer = signer
        self.secrets_dir = secrets_dir

    @classmethod
    async def start(
        cls,
        *,
        data_dir: str,
        plugins: Sequence[str] = (),
        entrypoints: bool = True,
        grant_ttl_s: float = 60.0,
        encryption_key_file: str = "",
        ledger_keep_s: float | None = None,
        timeout_s: float = 30.0,
    ) -> SpawnedToolHost:
        """Start ``python -m agentrt.toolhost`` on a free loopback port, over mTLS, and wait until it listens.

        Args:
            data_dir: The host's data dir (its ledger and plugin data).
            plugins: ``--plugin`` values.
            entrypoints: Also load the ``agentrt.tools`` entry points.
            grant_ttl_s: Seconds the grants this host gets live (``grants.ttl_s``).
            encryption_key_file: The host seals stored results with this key file when given.
            ledger_keep_s: ``--ledger-keep-s``, how long the host keeps settled ledger entries;
                None leaves the host's default.
            timeout_s: Seconds to wait for the readiness line.

        Raises:
            RuntimeError: the child exited or stayed silent past ``timeout_s``.
        """
        signer = GrantSigner(key=Ed25519PrivateKey.generate(), ttl_s=grant_ttl_s)
        secrets = await asyncio.to_thread(_private_dir, Path(data_dir))
        try:
            # Key generation and file writes: off the event loop.
            security, tls = await asyncio.to_thread(_secure, secrets, signer, encryption_key_file)
            args = [sys.executable, "-m", "agentrt.toolhost", "--listen", "127.0.0.1:0"]
            args += ["--data-dir", data_dir, "--log-format", active_format()]  # its lines read like ours
            for plugin in plugins:
                args += ["--plugin", plugin]
            if not entrypoints:
                args.append("--no-entrypoints")
            if ledger_keep_s is not None:
                args += ["--ledger-keep-s", repr(ledger_keep_s)]
            args += security
            process = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE)
        except BaseException:
            shutil.rmtree(secrets, ignore_errors=True)
            raise
        address = ""
        try:
            address = await _ready_address(process, timeout_s)
        finally:
            if not address:  # silent, exited, or we were cancelled meanwhile
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
                shutil.rmtree(secrets, ignore_errors=True)
        if not address:
            raise RuntimeError(
                f"local tool host did not start (exit {process.returncode}); its stderr is above"
            )
        return cls(process=process, address=address, tls=tls, signer=signer, secrets_dir=secrets)

    async def stop(self, *, grace_s: float = 5.0) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(grace_s):
                    await self.process.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
                await self.process.wait()
        # Drain stdout so its transport closes cleanly.
        if self.process.stdout is not None:
            with contextlib.suppress(Exception):
                await self.process.stdout.read()
        # Only once the child is gone: it re-reads these files while it serves.
        await asyncio.to_thread(shutil.rmtree, self.secrets_dir, True)
