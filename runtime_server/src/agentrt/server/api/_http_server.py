"""The HTTP face (``http_listen``) served by uvicorn as a task on the runtime's own event loop.

In process rather than a gateway: it calls the same servicer, engine and event bus (a follower
needs no extra hop, no second authentication setup, no forwarded identity), and drains with the
gRPC server. uvicorn's own signal handlers and access log are off: the runtime handles SIGTERM,
and its access log (``agentrt.http.access``) prints paths without query strings.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Generator

import uvicorn

from agentrt.server.api._http_app import HttpApp
from agentrt.server.config import ConfigError, Settings

__all__ = ["HttpServer", "check_http_auth"]


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # the runtime's loop owns SIGTERM/SIGINT (api/_server.serve)


def check_http_auth(settings: Settings) -> None:
    """Refuse an HTTP face whose callers could only authenticate by client certificate.

    Raises:
        ConfigError: ``auth.mtls`` is the only authenticator (uvicorn gives no peer certificate).
    """
    auth = settings.auth
    if auth.mtls and not (auth.tokens_file or auth.jwt is not None or auth.plugins):
        raise ConfigError(
            "http_listen: auth.mtls is gRPC only (the HTTP face sees no client certificate); "
            "configure auth.tokens_file or auth.jwt for HTTP callers, or drop http_listen"
        )


class HttpServer:
    """uvicorn on a socket bound here (so port 0 is known), started and stopped by the runtime."""

    def __init__(self, *, app: HttpApp, settings: Settings) -> None:
        host, _, port = settings.http_listen.rpartition(":")
        self._host = host.strip("[]")
        self._port = int(port)
        tls = settings.tls
        self._config = uvicorn.Config(
            app,
            log_config=None,
            access_log=False,
            lifespan="off",
            server_header=False,
            proxy_headers=False,  # X-Forwarded-For from a caller is not trusted
            ssl_certfile=tls.cert_file if tls.enabled else None,
            ssl_keyfile=tls.key_file if tls.enabled else None,
            timeout_graceful_shutdown=max(1, round(settings.rpc_grace_s)),
        )
        self._app = app
        self._server = _Server(self._config)
        self._socket: socket.socket | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> str:
        """Bind and serve; returns HOST:PORT.

        Raises:
            ConfigError: the address cannot be bound.
        """
        try:
            family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
            self._socket = socket.create_server((self._host, self._port), family=family)
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on {self._host}:{self._port} (http_listen): {exc.strerror}"
            ) from exc
        self._config.load()
        self._server.lifespan = self._config.lifespan_class(self._config)
        await self._server.startup(sockets=[self._socket])
        self._task = asyncio.get_running_loop().create_task(self._server.main_loop(), name="http-face")
        port = self._socket.getsockname()[1]
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"{host}:{port}"

    async def stop(self) -> None:
        """End SSE streams, stop accepting, let open calls finish within ``rpc_grace_s``, then cut them."""
        if self._task is None:
            return
        self._app.close_streams()  # follow streams never end by themselves: end them cleanly
        self._server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        await self._server.shutdown(sockets=[self._socket] if self._socket else None)
        self._task = None
