"""The channel to one tool host: plaintext, or mTLS that follows its files as they rotate.

Over TLS the runtime verifies the host's certificate against ``ca_file`` and presents its
own client certificate. When the CA, certificate or key file changes, the next call made
at least ``check_every_s`` after the last look builds a new channel from the new files;
calls already running finish on the old one, which is closed once they had time to.
A certificate that does not match its key yet (one file replaced, not the other) is not
taken: the current channel keeps serving until both files agree.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc
import grpc.aio
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from agentrt.proto.toolhost.v1 import tool_host_service_pb2_grpc as svc_grpc
from agentrt.toolhost.security import TlsFileError, channel_credentials

if TYPE_CHECKING:
    from agentrt.proto.toolhost.v1.tool_host_service_pb2_grpc import ToolHostServiceAsyncStub

__all__ = ["CHANNEL_OPTIONS", "POOL_SERVICE_CONFIG", "HostChannel", "HostTls"]

# gRPC spaces its reconnects to a down host up to 120 s by default: a host back after a long
# outage would stay unreachable to the runtime that long, past the reconcile interval of an
# unknown outcome. A reconnect a second to a down host is cheap.
RECONNECT_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 1000),
)
CHANNEL_OPTIONS = (
    ("grpc.enable_retries", 0),
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
    *RECONNECT_OPTIONS,
)
# A pool (several addresses, or a DNS name of many): calls go round robin over the members whose
# gRPC health check says SERVING; a draining or dead member gets no new calls.
POOL_SERVICE_CONFIG = json.dumps(
    {"loadBalancingConfig": [{"round_robin": {}}], "healthCheckConfig": {"serviceName": ""}}
)
TLS_CHECK_S = 3.0
# Calls still running on a replaced channel get this long before it is closed under them; tool
# timeouts are far shorter in practice, and the runtime's recovery handles anything cut off.
RETIRED_CHANNEL_GRACE_S = 600.0

_log = logging.getLogger("agentrt.tools")


@dataclasses.dataclass(frozen=True, kw_only=True)
class HostTls:
    """mTLS to a tool host: the CA its certificate chains to, and the runtime's client certificate."""

    ca_file: str
    cert_file: str = ""
    key_file: str = ""
    server_name: str = ""  # the name to verify in the host's certificate, when not its address

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(f for f in (self.ca_file, self.cert_file, self.key_file) if f)


def _stamp(paths: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    stamps = []
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            stamps.append((-1, -1))
            continue
        stamps.append((info.st_mtime_ns, info.st_size))
    return tuple(stamps)


def _pair_matches(cert_file: str, key_file: str) -> bool:
    try:
        with open(cert_file, "rb") as fh:
            cert = x509.load_pem_x509_certificate(fh.read())
        with open(key_file, "rb") as fh:
            key = serialization.load_pem_private_key(fh.read(), password=None)
    except (OSError, ValueError, TypeError):
        return False
    spki, der = serialization.PublicFormat.SubjectPublicKeyInfo, serialization.Encoding.DER
    return cert.public_key().public_bytes(der, spki) == key.public_key().public_bytes(der, spki)


class HostChannel:
    """A channel and stub to one tool host.

    Args:
        name: The host's configured name (for logs).
        address: The gRPC target: ``HOST:PORT``, ``dns:///NAME:PORT`` or ``ipv4:IP:PORT,IP:PORT``.
        pooled: Several hosts behind ``address``: round_robin over the healthy ones.
        tls: mTLS material; None for plaintext (loopback, or ``--insecure``).
        check_every_s: Seconds between looks at the TLS files.
        clock: Monotonic seconds (tests pass their own).
        max_receive_bytes: The largest response accepted (a tool result at its maximum); 0: 16 MiB.

    Raises:
        TlsFileError: A TLS file is missing or not PEM, or the certificate does not match its key.
    """

    def __init__(
        self,
        *,
        name: str,
        address: str,
        tls: HostTls | None,
        check_every_s: float = TLS_CHECK_S,
        clock: Callable[[], float] = time.monotonic,
        max_receive_bytes: int = 0,
        pooled: bool = False,
    ) -> None:
        self.name = name
        self._options: tuple[tuple[str, str | int], ...] = CHANNEL_OPTIONS
        if max_receive_bytes:
            self._options = (
                ("grpc.enable_retries", 0),
                ("grpc.max_receive_message_length", max_receive_bytes),
                *RECONNECT_OPTIONS,
            )
        if pooled:
            self._options = (*self._options, ("grpc.service_config", POOL_SERVICE_CONFIG))
        self.pooled = pooled
        self.address = address
        self._tls = tls
        self._check_every = check_every_s
        self._clock = clock
        self._retiring: dict[asyncio.Task[None], grpc.aio.Channel] = {}
        self.reloads = 0
        self._stamp = _stamp(tls.files) if tls is not None else ()
        self._checked = clock()
        self.channel = self._open()
        self._stub: ToolHostServiceAsyncStub = svc_grpc.ToolHostServiceStub(self.channel)

    @property
    def secured(self) -> bool:
        """Over mTLS."""
        return self._tls is not None

    def _open(self) -> grpc.aio.Channel:
        tls = self._tls
        if tls is None:
            return grpc.aio.insecure_channel(self.address, options=self._options)
        if tls.cert_file and not _pair_matches(tls.cert_file, tls.key_file):
            raise TlsFileError(f"certificate {tls.cert_file} does not match the key {tls.key_file}")
        credentials = channel_credentials(ca_file=tls.ca_file, cert_file=tls.cert_file, key_file=tls.key_file)
        options = self._options
        if tls.server_name:
            options = (*options, ("grpc.ssl_target_name_override", tls.server_name))
        return grpc.aio.secure_channel(self.address, credentials, options=options)

    def stub(self) -> ToolHostServiceAsyncStub:
        """The stub for the next call; over TLS, from files no older than ``check_every_s``."""
        if self._tls is not None:
            now = self._clock()
            if now - self._checked >= self._check_every:
                self._checked = now
                self._follow_files()
        return self._stub

    def _follow_files(self) -> None:
        assert self._tls is not None
        stamp = _stamp(self._tls.files)
        if stamp == self._stamp:
            return
        try:
            channel = self._open()
        except TlsFileError as exc:
            # Mid-rotation (one file written, not the other) or unreadable: keep the current channel.
            _log.warning("TLS files of tool host %r changed but cannot be used yet: %s", self.name, exc)
            return
        old = self.channel
        self._stamp = stamp
        self.channel = channel
        self._stub = svc_grpc.ToolHostServiceStub(channel)
        self.reloads += 1
        task = asyncio.get_running_loop().create_task(old.close(RETIRED_CHANNEL_GRACE_S))
        self._retiring[task] = old
        task.add_done_callback(lambda done: self._retiring.pop(done, None))
        _log.info("TLS files of tool host %r changed: new calls use a new channel", self.name)

    async def connected(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a connection to the host; False when none was made in time.

        A call is sent only on a ready channel: then a call that found no connection provably never
        left, however the connect failed (refused, silent, a stalled handshake). ``wait_for_ready=False``
        plus the call's deadline cannot say that: its DEADLINE_EXCEEDED looks the same whether the
        request was queued for a connection or reached the host.
        """
        channel = self.channel
        if channel.get_state(try_to_connect=True) is grpc.ChannelConnectivity.READY:
            return True
        try:
            async with asyncio.timeout(timeout_s):
                await channel.channel_ready()
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        """Close the channel and any replaced one still finishing calls."""
        for task, old in list(self._retiring.items()):
            task.cancel()
            await old.close(None)
        await self.channel.close(None)
