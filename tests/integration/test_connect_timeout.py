"""The connect layer (``[timeouts] connect_s``): a tool host that cannot be reached fails a call fast
and provably unsent, not after the call's own timeout and never "in doubt".

A real tool host process sits behind a TCP relay in the test; switched to "blackhole", the relay
drops the open connection and then accepts new ones but never answers (a silent host: the TLS or
HTTP/2 handshake never completes), the case a bare call deadline cannot tell from a host that got
the request. Stopping the relay instead leaves an address nobody listens on.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentrt.server.core import ToolErrorCode
from agentrt.server.tools import CallMetadata, ToolRouter
from agentrt.testing import ToolHostProcess, spawn_tool_host

CONNECT_S = 1.0
CALL_TIMEOUT_S = 30.0


class Relay:
    """Forwards TCP to ``upstream``; with ``blackhole`` set it drops its connections and swallows new ones."""

    def __init__(self, upstream: str):
        self.upstream_host, port = upstream.rsplit(":", 1)
        self.upstream_port = int(port)
        self.blackhole = False
        self.writers: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None
        self.address = ""

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.address = f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.add(writer)
        try:
            if self.blackhole:
                while await reader.read(65536):
                    pass  # swallowed: the client never hears back
                return
            up_reader, up_writer = await asyncio.open_connection(self.upstream_host, self.upstream_port)
            self.writers.add(up_writer)
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer), return_exceptions=True)
        finally:
            writer.close()

    def go_dark(self) -> None:
        self.blackhole = True
        for writer in list(self.writers):
            writer.close()
        self.writers.clear()

    async def stop(self) -> None:
        self.go_dark()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


@pytest.fixture
def blob_host(tmp_path: Path) -> Iterator[ToolHostProcess]:
    with spawn_tool_host(tmp_path / "toolhost", plugins=["agentrt.plugins.blob_tools"]) as host:
        yield host


def meta() -> CallMetadata:
    return CallMetadata(
        idempotency_key=uuid.uuid4().hex, run_id="r1", call_id="c1", attempt=1, fencing_token=1
    )


async def call(router: ToolRouter) -> tuple[float, object]:
    began = time.monotonic()
    outcome = await router.invoke(
        "blob.make", '{"size_bytes": 10}', metadata=meta(), timeout_s=CALL_TIMEOUT_S
    )
    return time.monotonic() - began, outcome


@pytest.mark.parametrize("failure", ["blackholed", "nobody_listens"])
async def test_an_unreachable_host_fails_the_call_as_unsent_within_connect_s(
    blob_host: ToolHostProcess, failure: str
) -> None:
    relay = Relay(blob_host.address)
    await relay.start()
    router = ToolRouter(connect_s=CONNECT_S)
    try:
        await router.add_host("blobs", relay.address)
        took, outcome = await call(router)
        assert outcome.error is None  # type: ignore[attr-defined]

        if failure == "blackholed":
            relay.go_dark()
        else:
            await relay.stop()
        # A call right after the loss may find the channel not yet aware of it and fail at once
        # (gRPC's own "failed to connect"): sent on a channel that was ready, so in doubt, never
        # slow. Within a few calls the channel knows, and a call waits out the connect layer.
        for _ in range(5):
            took, outcome = await call(router)
            if outcome.connect_failed:  # type: ignore[attr-defined]
                break
            assert outcome.transport_lost and took < CONNECT_S  # type: ignore[attr-defined]

        print(
            f"{failure}: the call failed after {took:.2f}s"
            f" (connect_s {CONNECT_S}, call timeout {CALL_TIMEOUT_S})"
        )
        assert CONNECT_S * 0.9 <= took < CONNECT_S + 2.0  # the connect layer, not the call's 30 s
        assert outcome.code is ToolErrorCode.TRANSIENT  # type: ignore[attr-defined]
        assert outcome.connect_failed and outcome.never_sent  # type: ignore[attr-defined]
        assert not outcome.in_doubt  # type: ignore[attr-defined]  # never sent: a write goes again, same key
    finally:
        await router.close()
        await relay.stop()
