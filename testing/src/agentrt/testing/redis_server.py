"""A test-owned ``redis-server`` on a free loopback port, to kill, restart and configure (ACL, TLS).

Needs the ``redis-server`` binary on ``PATH``; nothing here imports redis-py::

    with RedisServer(tmp_path / "redis", users={"agentrt": "s3cret"}) as server:
        url = server.url            # redis://127.0.0.1:PORT (the password goes elsewhere)
        server.kill()               # SIGKILL: an outage with no goodbye
        server.start()              # the same port, the same users
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Self

__all__ = ["RedisServer", "redis_server_available"]


#: What the runtime's global tool limits run ([redis] tool_limits = "global"; README, Redis).
SLOT_COMMANDS = "+evalsha +eval +script|load +zadd +zrem +zcard +zscore +zremrangebyscore +pexpire +time"


def redis_server_available() -> bool:
    return shutil.which("redis-server") is not None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One ``redis-server`` child; ``start`` again after ``kill`` reuses its port and users.

    Args:
        directory: Where its ACL file and log go (created).
        users: ACL users and their passwords; each may use the channels under ``channel_prefix``
            for pub/sub, the keys under it for the global tool limits (``SLOT_COMMANDS``), and
            connection commands, nothing else. The default user is then off.
        channel_prefix: The channel and key prefix the users are allowed (``&PREFIX*``, ``~PREFIX*``).
        tls: ``(ca_file, cert_file, key_file)``: serve TLS only (``rediss://``), clients not asked
            for a certificate.
    """

    def __init__(
        self,
        directory: Path,
        *,
        users: Mapping[str, str] | None = None,
        channel_prefix: str = "",
        tls: tuple[Path, Path, Path] | None = None,
    ):
        self.directory = directory
        self.users = dict(users or {})
        self.channel_prefix = channel_prefix
        self.tls = tls
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None
        directory.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}"

    def _args(self) -> list[str]:
        args = ["redis-server", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        args += ["--dir", str(self.directory), "--logfile", str(self.directory / "redis.log")]
        if self.tls:
            ca, cert, key = self.tls
            args += ["--port", "0", "--tls-port", str(self.port), "--tls-auth-clients", "no"]
            args += ["--tls-ca-cert-file", str(ca), "--tls-cert-file", str(cert), "--tls-key-file", str(key)]
        else:
            args += ["--port", str(self.port)]
        if self.users:
            acl = self.directory / "users.acl"
            lines = ["user default off"]
            for name, password in self.users.items():
                lines.append(
                    f"user {name} on >{password} resetchannels &{self.channel_prefix}* "
                    f"resetkeys ~{self.channel_prefix}* -@all +@pubsub +@connection {SLOT_COMMANDS}"
                )
            acl.write_text("\n".join(lines) + "\n")
            args += ["--aclfile", str(acl)]
        return args

    def start(self, timeout: float = 10.0) -> None:
        """Start it and wait until it accepts connections.

        Raises:
            RuntimeError: it exited or did not listen in time (its log is in the message).
        """
        self.process = subprocess.Popen(self._args(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2):
                return
            time.sleep(0.02)
        log = self.directory / "redis.log"
        text = log.read_text()[-2000:] if log.exists() else ""
        self.kill()
        raise RuntimeError(f"redis-server did not start on port {self.port}:\n{text}")

    def kill(self) -> None:
        """SIGKILL and wait: connections drop without a goodbye."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        self.kill()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
