"""One supervised connection per MCP server, on the plugin's own event loop thread.

The tool host's hooks are sync and run before its loop starts, and its tools run on that loop
(perhaps uvloop); the MCP sessions live on one dedicated asyncio loop in a daemon thread instead,
so they outlive nothing of the host's and a tool call crosses over with
``run_coroutine_threadsafe`` (cancelling the call cancels the request, which sends
``notifications/cancelled``).

A connection's supervisor task owns the session: it connects, lists the tools, watches the
session (a ``tools/list`` every two seconds) and, when it is lost (a stdio child that died, a dropped HTTP
transport), connects again after a capped exponential backoff. Calls never re-send: a call whose
session was lost after its request went out fails with the effect unknown.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar, cast

from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from agentrt.toolhost.mcp._config import ServerConfig
from agentrt.toolhost.mcp._mapping import ToolDefinition
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

__all__ = ["BACKOFF_CAP_S", "BACKOFF_START_S", "McpLoop", "ServerConnection", "SessionLost", "backoff_s"]

_log = logging.getLogger("agentrt.toolhost.mcp")
_T = TypeVar("_T")

BACKOFF_START_S = 0.2
BACKOFF_CAP_S = 10.0
_PROBE_EVERY_S = 2.0
_MAX_PAGES = 32  # tools/list pages; a server paging forever cannot hang the host


def backoff_s(attempt: int, *, start: float = BACKOFF_START_S, cap: float = BACKOFF_CAP_S) -> float:
    """Seconds to wait before reconnect ``attempt`` (0, 1, ...): doubling from ``start``, capped."""
    return float(min(cap, start * 2 ** min(attempt, 30)))


class SessionLost(Exception):
    """The session ended (or was never up) around a call.

    Attributes:
        sent: The request may have reached the server (its effect is unknown).
    """

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


class McpLoop:
    """An asyncio loop in a daemon thread, where every MCP session lives."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="agentrt-mcp", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, _T], *, timeout: float) -> _T:
        """Run ``coro`` there and wait for it from a thread without a loop (the startup hook)."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout:.0f}s") from None

    async def call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coro`` there and await it from another loop; cancelling this cancels it."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))


class ServerConnection:
    """The supervised session of one configured MCP server (runs on :class:`McpLoop`).

    Args:
        server_id: The configured id (the tools' name prefix).
        config: Its table.
        headers: Resolved HTTP headers (secrets: never logged).
        on_listing: Called with each connection's tool definitions (the first and every reconnect).
        counters: The host's counters (``mcp_reconnects``, ...).
    """

    def __init__(
        self,
        *,
        server_id: str,
        config: ServerConfig,
        headers: Mapping[str, str],
        on_listing: Callable[[list[ToolDefinition]], None],
        counters: collections.Counter[str],
    ) -> None:
        self.server_id = server_id
        self._config = config
        self._headers = dict(headers)
        self._on_listing = on_listing
        self._counters = counters
        self._client: Client | None = None
        self._ready = asyncio.Event()
        self._lost = asyncio.Event()
        self._first: asyncio.Future[list[ToolDefinition]] | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> list[ToolDefinition]:
        """Start supervising and return the first listing.

        Raises:
            Exception: the first connection or listing failed (the caller reports it).
        """
        self._first = asyncio.get_running_loop().create_future()
        self._task = asyncio.get_running_loop().create_task(self._supervise(), name=f"mcp {self.server_id}")
        try:
            return await self._first
        except BaseException:
            self._task.cancel()
            raise

    def _transport(self) -> Any:
        if self._config.command is not None:
            params = StdioServerParameters(
                command=self._config.command,
                args=list(self._config.args),
                env=dict(self._config.env) or None,
                cwd=self._config.cwd,
            )
            return params
        return None

    @contextlib.asynccontextmanager
    async def _session(self) -> Any:
        params = self._transport()
        if params is not None:
            async with Client(params, cache=None) as client:
                yield client
            return
        assert self._config.url is not None
        async with (
            create_mcp_http_client(headers=self._headers or None) as http,
            Client(streamable_http_client(self._config.url, http_client=http), cache=None) as client,
        ):
            yield client

    async def _supervise(self) -> None:
        attempt = 0
        while True:
            try:
                async with self._session() as client:
                    definitions = await self._list(client)
                    self._on_listing(definitions)
                    if self._first is not None and not self._first.done():
                        self._first.set_result(definitions)
                    self._client = client
                    self._lost.clear()
                    self._ready.set()
                    attempt = 0
                    await self._watch(client)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._first is not None and not self._first.done():
                    self._first.set_exception(exc)
                    return
                # The type only: a message could carry a URL's query or a header echoed back.
                _log.warning("MCP server %s: session lost or not up (%s)", self.server_id, type(exc).__name__)
            finally:
                self._client = None
                self._ready.clear()
            self._counters["mcp_reconnects"] += 1
            delay = backoff_s(attempt)
            attempt += 1
            _log.info("MCP server %s: connecting again in %.1fs", self.server_id, delay)
            await asyncio.sleep(delay)

    async def _list(self, client: Client, *, cache_mode: Any = "use") -> list[ToolDefinition]:
        definitions: list[ToolDefinition] = []
        cursor: str | None = None
        async with asyncio.timeout(self._config.connect_timeout_s):
            for _ in range(_MAX_PAGES):
                page = await client.list_tools(cursor=cursor, cache_mode=cache_mode)
                for tool in page.tools:
                    if len(definitions) >= self._config.max_tools:
                        raise ValueError(f"more than max_tools={self._config.max_tools} tools")
                    definitions.append(
                        ToolDefinition.from_listing(
                            tool.model_dump(by_alias=True, exclude_none=True, mode="json")
                        )
                    )
                cursor = page.next_cursor
                if cursor is None:
                    break
        return definitions

    async def _watch(self, client: Client) -> None:
        # 2026-07-28 removed ping: a tools/list every few seconds is the liveness probe, and it
        # re-checks the definitions within a session too (a changed one is refused at once).
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_PROBE_EVERY_S):
                    await self._lost.wait()
                    return
            try:
                definitions = await self._list(client, cache_mode="refresh")
            except (MCPError, TimeoutError, OSError, ValueError):
                return
            self._on_listing(definitions)

    async def call(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        meta: Mapping[str, Any],
        deadline: float | None,
        check: Callable[[], None] = lambda: None,
    ) -> dict[str, Any]:
        """One ``tools/call``; waits for a session that is down, within ``deadline``.

        Args:
            name: The server's own tool name.
            arguments: Validated arguments.
            meta: ``params._meta``.
            deadline: ``time.monotonic()`` by which to give up (None: no bound).
            check: Raises to refuse the call once a session is up (the listing it saw is current).

        Returns:
            The result, by alias as on the wire.

        Raises:
            SessionLost: no session came up in time (``sent=False``), or it ended under the
                call (``sent=True``).
            TimeoutError: the request timed out after it was sent.
            MCPError: the server answered with a JSON-RPC error.
        """
        remaining = None if deadline is None else deadline - time.monotonic()
        try:
            async with asyncio.timeout(remaining):
                await self._ready.wait()
        except TimeoutError:
            raise SessionLost(f"MCP server {self.server_id} is not connected", sent=False) from None
        client = self._client
        if client is None:
            raise SessionLost(f"MCP server {self.server_id} is not connected", sent=False)
        check()
        remaining = None if deadline is None else max(0.001, deadline - time.monotonic())
        try:
            result = await client.call_tool(
                name, dict(arguments), read_timeout_seconds=remaining, meta=cast(Any, dict(meta))
            )
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                self._lost.set()
                raise SessionLost(
                    f"MCP server {self.server_id}: the session ended during the call", sent=True
                ) from None
            if exc.code == REQUEST_TIMEOUT:
                raise TimeoutError from None
            raise
        except (OSError, ConnectionError) as exc:
            self._lost.set()
            raise SessionLost(f"MCP server {self.server_id}: {type(exc).__name__}", sent=True) from None
        dumped: dict[str, Any] = result.model_dump(by_alias=True, exclude_none=True, mode="json")
        return dumped

    async def close(self) -> None:
        """Stop supervising and close the session (a stdio child is stopped)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
