"""The tool host: gRPC server, health, reflection, ledger and tools, with graceful shutdown."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import grpc.aio
import pluggy
from grpc_health.v1 import _async as health_aio  # health.aio; the stubs lack it
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from agentrt.proto.toolhost.v1 import tool_host_service_pb2, tool_host_service_pb2_grpc
from agentrt.toolhost._authorize import CallGate
from agentrt.toolhost._cipher import PayloadCipher
from agentrt.toolhost._config import ToolHostConfig
from agentrt.toolhost._context import DEFAULT_DATA_DIR
from agentrt.toolhost._grants import GrantVerifier
from agentrt.toolhost._ledger import Ledger
from agentrt.toolhost._ledger_backend import LedgerBackend
from agentrt.toolhost._ledger_pg_config import PgLedgerOptions
from agentrt.toolhost._ledger_retention import LedgerRetention, run_ledger_retention
from agentrt.toolhost._ledger_types import LedgerUnavailable
from agentrt.toolhost._parse import add_parsing_in_handler
from agentrt.toolhost._plugins import get_plugin_manager
from agentrt.toolhost._sdk import Tool
from agentrt.toolhost._server import ToolHostServicer
from agentrt.toolhost._tls import ReloadingServerCredentials
from agentrt.toolhost.tracing import TraceContextInterceptor

__all__ = ["LEDGER_FILE", "SERVICE_NAME", "ToolHost", "parse_listen"]

SERVICE_NAME: str = tool_host_service_pb2.DESCRIPTOR.services_by_name["ToolHostService"].full_name
LEDGER_FILE = "ledger.sqlite"
# After NOT_SERVING, the host keeps answering (refusing new calls as draining) at least this long
# (within the grace) while a client watches its health: the time for a pool channel's health
# watch to hear it and pick elsewhere.
DRAIN_LINGER_S = 0.5

_log = logging.getLogger(__name__)


def parse_listen(listen: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[v6]:PORT`` for IPv6); port 0 picks a free port.

    Raises:
        ValueError: Not a ``HOST:PORT`` with a port in 0..65535.
    """
    host, sep, port_text = listen.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError("expected HOST:PORT, e.g. 127.0.0.1:0")
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"port {port} is out of range")
    if host.startswith("[") != host.endswith("]"):
        raise ValueError("unbalanced brackets around an IPv6 host")
    if ":" in host and not host.startswith("["):
        raise ValueError("write an IPv6 host in brackets, e.g. [::1]:0")
    return host, port


class ToolHost:
    """A tool host serving ``tools`` over ``agentrt.toolhost.v1.ToolHostService``.

    Usable in-process (tests, the embedded demo) as well as by ``python -m agentrt.toolhost``::

        async with ToolHost(tools=tools, data_dir=tmp_path) as host:
            await host.start("127.0.0.1:0")
            ...  # connect to host.address

    Args:
        tools: Tools by name (see ``collect_tools``).
        data_dir: Directory of the ledger; handed to tools as ``ctx.data_dir``.
        pm: Plugin manager for ``agentrt_preview_tool``; an empty one when None.
        cancel_grace: Seconds a cancelled tool gets to stop on its own.
        credentials: TLS (mTLS with a client CA) to serve with; plaintext when None.
        verifier: Verifies the runtime's call grants; None obeys unsigned calls as tenant ""
            (development on loopback).
        cipher: Seals stored outcomes in the ledger; None stores them in clear.
        ledger_retention: How long settled ledger entries are kept; None never prunes.
        config: What the plugins were configured with (the query hook gets it too); by default
            ``data_dir`` and no options.
        shared_ledger: A PostgreSQL ledger the hosts of a pool share; None keeps the ledger in a
            SQLite file in ``data_dir``.
    """

    def __init__(
        self,
        *,
        tools: Mapping[str, Tool],
        data_dir: Path = DEFAULT_DATA_DIR,
        pm: pluggy.PluginManager | None = None,
        cancel_grace: float = 2.0,
        credentials: ReloadingServerCredentials | None = None,
        verifier: GrantVerifier | None = None,
        cipher: PayloadCipher | None = None,
        ledger_retention: LedgerRetention | None = LedgerRetention(),  # noqa: B008 - frozen, shared safely
        config: ToolHostConfig | None = None,
        shared_ledger: PgLedgerOptions | None = None,
    ) -> None:
        self.tools = dict(tools)
        self._shared_ledger = shared_ledger
        self._config = config
        self._ledger_retention = ledger_retention
        self._retention_task: asyncio.Task[None] | None = None
        self._credentials = credentials
        self._gate = CallGate(verifier=verifier)
        self._cipher = cipher
        self.data_dir = data_dir
        # Shared with the plugins through their config, so a plugin's events are served too.
        self.counters: collections.Counter[str] = (
            config.counters if config is not None else collections.Counter()
        )
        self.address: str | None = None
        self._pm = pm if pm is not None else get_plugin_manager(entrypoints=False)
        self._cancel_grace = cancel_grace
        self._server: grpc.aio.Server | None = None
        self._health: WatchedHealth | None = None
        self._ledger: LedgerBackend | None = None
        self._servicer: ToolHostServicer | None = None

    async def start(self, listen: str = "127.0.0.1:0") -> str:
        """Bind, open the ledger and start serving.

        Args:
            listen: ``HOST:PORT``; port 0 picks a free port.

        Returns:
            The address served, ``HOST:PORT`` with the real port.

        Raises:
            ValueError: ``listen`` is malformed.
            OSError: The address cannot be bound.
            RuntimeError: Already started.
            LedgerUnavailable: The shared ledger's database cannot be reached (no password shown).
            LedgerVersionError: The ledger was written by a newer tool host.
        """
        if self._server is not None:
            raise RuntimeError("the tool host is already started")
        host, _ = parse_listen(listen)
        # First: the call's span covers everything the host does for it, continuing the caller's trace.
        server = grpc.aio.server(interceptors=[TraceContextInterceptor(tracer_name="agentrt.toolhost")])
        try:
            if self._credentials is None:
                port = server.add_insecure_port(listen)
            else:
                port = server.add_secure_port(listen, self._credentials.credentials)
        except RuntimeError as exc:
            raise OSError(f"cannot listen on {listen}: {exc}") from None
        if port == 0:
            raise OSError(f"cannot listen on {listen}")
        # The ledger is opened only after the bind worked, so a bad address leaves no files behind.
        ledger = self._open_ledger()
        servicer = ToolHostServicer(
            tools=self.tools,
            pm=self._pm,
            ledger=ledger,
            data_dir=self.data_dir,
            counters=self.counters,
            gate=self._gate,
            cancel_grace=self._cancel_grace,
            config=self._config,
        )
        add_parsing_in_handler(
            tool_host_service_pb2_grpc.add_ToolHostServiceServicer_to_server, servicer, server
        )
        health_servicer = WatchedHealth()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        services = (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME)
        reflection.enable_server_reflection(services, server)
        try:
            await server.start()
        except BaseException:
            ledger.close()
            raise
        for service in (SERVICE_NAME, health.OVERALL_HEALTH):
            await health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
        self._server, self._health, self._ledger, self._servicer = server, health_servicer, ledger, servicer
        if self._ledger_retention is not None:
            self._retention_task = asyncio.get_running_loop().create_task(
                run_ledger_retention(ledger.prune, self._ledger_retention)
            )
        self.address = f"{host}:{port}"
        _log.info(
            "serving %d tool(s) on %s (%s, %s), data in %s, ledger %s",
            len(self.tools),
            self.address,
            "plaintext" if self._credentials is None else "mTLS",
            "call grants verified" if self._gate.verifying else "unsigned calls obeyed",
            self.data_dir,
            ledger.description,
        )
        return self.address

    def _open_ledger(self) -> LedgerBackend:
        # A fresh owner id per start: across a pool (and across restarts) no two lives share one.
        owner = uuid.uuid4().hex
        if self._shared_ledger is None:
            return Ledger(self.data_dir / LEDGER_FILE, owner=owner, cipher=self._cipher)
        try:
            from agentrt.toolhost._ledger_pg import PgLedger
        except ImportError:
            raise LedgerUnavailable(
                "a PostgreSQL ledger needs psycopg: pip install 'agentrt-toolhost[postgres]'"
            ) from None
        return PgLedger(self._shared_ledger, owner=owner, cipher=self._cipher)

    async def stop(self, grace: float | None = 5.0, *, linger_s: float = 0.0) -> None:
        """Report NOT_SERVING, finish or cancel in-flight calls within ``grace``, close the ledger.

        Args:
            grace: Seconds in-flight calls get to finish; None waits for them all.
            linger_s: Seconds (within ``grace``) the host still refuses calls as draining after
                NOT_SERVING, however soon its calls finished (a SIGTERM: :data:`DRAIN_LINGER_S`).
        """
        if self._server is None:
            return
        assert self._health is not None and self._ledger is not None and self._servicer is not None
        await self._health.enter_graceful_shutdown()
        if self._retention_task is not None:
            self._retention_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._retention_task
            self._retention_task = None
        # New calls are refused (UNAVAILABLE, retryable) while the ones in flight get ``grace``;
        # queries are still answered meanwhile. stop() then cancels what is left (their tools
        # get the signal).
        drain = self._servicer.drain
        drain.begin(retry_after_s=grace or 0.0)
        if drain.in_flight:
            _log.info("draining: %d call(s) in flight, %s", drain.in_flight, _bound(grace))
        loop = asyncio.get_running_loop()
        if not self._health.watching:
            linger_s = 0.0  # no pool channel watches this host's health: none would route elsewhere
        linger_until = loop.time() + (linger_s if grace is None else min(linger_s, grace))
        finished = await drain.wait_idle(grace)
        if not finished:
            _log.warning("drain: %d call(s) still running after %ss; cancelling them", drain.in_flight, grace)
        # A client that picked this host just before it heard NOT_SERVING gets the typed refusal
        # (never sent: it goes elsewhere at once), not a connection closed under its call (in
        # doubt: a write is looked up first, a read's attempt fails).
        await asyncio.sleep(max(0.0, linger_until - loop.time()))
        await self._server.stop(0)
        await self._servicer.operations.drain(within=self._cancel_grace)
        self._ledger.close()
        self._server = None
        _log.info("stopped; counters: %s", dict(sorted(self.counters.items())))

    async def wait_for_termination(self) -> None:
        """Wait until the server stops."""
        if self._server is not None:
            await self._server.wait_for_termination()

    async def __aenter__(self) -> ToolHost:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop(grace=None if exc[0] is None else 0)


class WatchedHealth(health_aio.HealthServicer):  # type: ignore[misc]  # untyped module
    """gRPC health, counting the Watch streams open (pool channels health-check with Watch)."""

    def __init__(self) -> None:
        super().__init__()
        self.watching = 0

    async def Watch(self, request: health_pb2.HealthCheckRequest, context: Any) -> None:
        self.watching += 1
        try:
            await super().Watch(request, context)
        finally:
            self.watching -= 1


def _bound(grace: float | None) -> str:
    return "no time bound" if grace is None else f"up to {grace}s"
