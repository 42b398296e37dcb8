"""Spawns a local tool host child process for the embedded default.

The child's stderr is inherited (its logs land beside the runtime's); stdout is
piped only for the one readiness line.

A spawned host is secured with no setup: the runtime makes a throwaway PKI under the
host's data dir (``tls/``: a CA, the host's certificate for 127.0.0.1, the runtime's
client certificate) and writes the public key of its grant signer next to it
(``grant-keys.pem``); the host then serves mTLS and obeys only grants signed by this
runtime. Both are made anew at every start.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from agentrt.server.tools._channel import HostTls
from agentrt.toolhost.security import generate_dev_pki

READY_PREFIX = "agentrt-toolhost listening on "
RUNTIME_CLIENT = "agentrt-runtime"
GRANT_KEYS_FILE = "grant-keys.pem"
TLS_DIR = "tls"


def _secure(
    data_dir: Path, grant_public_key: bytes | None, encryption_key_file: str
) -> tuple[list[str], HostTls]:
    """The host's security flags, and the TLS material the runtime connects with."""
    data_dir.mkdir(parents=True, exist_ok=True)
    pki = generate_dev_pki(data_dir / TLS_DIR, hosts=("127.0.0.1", "localhost"), clients=(RUNTIME_CLIENT,))
    args = ["--tls-cert", str(pki.server_cert_file), "--tls-key", str(pki.server_key_file)]
    args += ["--client-ca", str(pki.ca_file)]
    if grant_public_key is not None:
        keys_file = data_dir / GRANT_KEYS_FILE
        keys_file.write_bytes(grant_public_key)
        args += ["--grant-keys", str(keys_file)]
    if encryption_key_file:
        args += ["--encryption-key-file", encryption_key_file]
    cert, key = pki.client_files[RUNTIME_CLIENT]
    return args, HostTls(ca_file=str(pki.ca_file), cert_file=str(cert), key_file=str(key))


class SpawnedToolHost:
    """A tool host child process; ``address`` is where it listens, ``tls`` how to reach it."""

    def __init__(self, process: asyncio.subprocess.Process, address: str, tls: HostTls):
        self.process = process
        self.address = address
        self.tls = tls

    @classmethod
    async def start(
        cls,
        *,
        data_dir: str,
        plugins: Sequence[str] = (),
        entrypoints: bool = True,
        grant_public_key: bytes | None = None,
        encryption_key_file: str = "",
        ledger_keep_s: float | None = None,
        timeout_s: float = 30.0,
    ) -> SpawnedToolHost:
        """Start ``python -m agentrt.toolhost`` on a free loopback port, over mTLS, and wait until it listens.

        Args:
            data_dir: The host's data dir; its TLS material and trusted grant key are written there.
            plugins: ``--plugin`` values.
            entrypoints: Also load the ``agentrt.tools`` entry points.
            grant_public_key: PEM public key of the runtime's grant signer; None leaves the host
                obeying unsigned calls (``grants.enabled = false``).
            encryption_key_file: The host seals stored results with this key file when given.
            ledger_keep_s: ``--ledger-keep-s``, how long the host keeps settled ledger entries;
                None leaves the host's default.
            timeout_s: Seconds to wait for the readiness line.

        Raises:
            RuntimeError: the child exited or stayed silent past ``timeout_s``.
        """
        # Key generation and file writes: off the event loop.
        security, tls = await asyncio.to_thread(
            _secure, Path(data_dir), grant_public_key, encryption_key_file
        )
        args = [sys.executable, "-m", "agentrt.toolhost", "--listen", "127.0.0.1:0", "--data-dir", data_dir]
        for plugin in plugins:
            args += ["--plugin", plugin]
        if not entrypoints:
            args.append("--no-entrypoints")
        if ledger_keep_s is not None:
            args += ["--ledger-keep-s", repr(ledger_keep_s)]
        args += security
        process = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE)
        assert process.stdout is not None
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    line = (await process.stdout.readline()).decode()
                    if not line:
                        break
                    if line.startswith(READY_PREFIX):
                        return cls(process, line.removeprefix(READY_PREFIX).strip(), tls)
        except TimeoutError:
            pass
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise RuntimeError(f"local tool host did not start (exit {process.returncode}); its stderr is above")

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
