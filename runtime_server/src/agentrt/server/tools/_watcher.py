"""Keeps one tool host's listing fresh: ListTools when it (re)appears, periodically, and with a
backoff while it does not answer.

A host down when the runtime starts is learned when it comes up; a host restarted with a new
plugin version is listed again as its channel reconnects, so its new specs (and tools it no
longer serves) reach the router. A pool's channel stays connected while any member serves, so
a pool is also re-listed every ``relist_s``. What a listing changes is the router's business
(``on_listed``); this module only asks and reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Sequence

import grpc
import grpc.aio

from agentrt.proto.toolhost.v1 import tool_host_service_pb2 as svc
from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.server.core import tool_hosts
from agentrt.server.tools._channel import HostChannel

__all__ = ["HostWatcher", "Listed"]

_log = logging.getLogger("agentrt.tools")

# on_listed(host name, its specs, why it was listed: "reconnected", "periodic" or "retry")
Listed = Callable[[str, Sequence[tool_pb2.ToolSpec], str], None]


class HostWatcher:
    """One host's background re-lister.

    Args:
        host: The host's channel.
        on_listed: Called with every successful listing (the router applies it).
        on_failed: Called with the host's name after a failed ListTools (counted by the router).
        policy: Re-list interval and the backoff after failures.
        list_timeout_s: The deadline of one ListTools.
        listed: The host answered its first ListTools already.
        first_error: Why its first ListTools failed, already logged (the same reason is not again).
        rand: A number in [0, 1) for the backoff's jitter (tests pass their own).
    """

    def __init__(
        self,
        *,
        host: HostChannel,
        on_listed: Listed,
        on_failed: Callable[[str], None],
        policy: tool_hosts.RelistPolicy,
        list_timeout_s: float,
        listed: bool,
        first_error: str = "",
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.host = host
        self._on_listed = on_listed
        self._on_failed = on_failed
        self._policy = policy
        self._list_timeout_s = list_timeout_s
        self._failures = 0 if listed else 1
        self._rand = rand
        self._task: asyncio.Task[None] | None = None
        self._last_error = first_error

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"relist-{self.host.name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            if self._failures:
                delay = tool_hosts.relist_delay_s(
                    failures=self._failures, policy=self._policy, rand=self._rand()
                )
                await self._until_ready(delay)
                why = "retry"
            else:
                why = "reconnected" if await self._until_reappeared(self._policy.every_s) else "periodic"
            try:
                specs = await list_tools(self.host, timeout_s=self._list_timeout_s, wait_for_ready=False)
            except grpc.aio.AioRpcError as exc:
                self._failed(exc)
                continue
            except Exception:  # a bug must not end the watcher: the host would never be learned again
                _log.exception("re-listing the tools of tool host %r failed", self.host.name)
                self._failures += 1
                continue
            if self._failures:
                _log.info("tool host %r answers ListTools again", self.host.name)
            self._failures, self._last_error = 0, ""
            try:
                self._on_listed(self.host.name, specs, why)
            except Exception:  # the same: the next listing is applied again
                _log.exception("applying the tools listed by tool host %r failed", self.host.name)
                self._failures = 1

    def _failed(self, exc: grpc.aio.AioRpcError) -> None:
        self._failures += 1
        self._on_failed(self.host.name)
        error = rpc_error_text(exc)
        if error != self._last_error:  # once per distinct reason, not once per retry
            self._last_error = error
            _log.warning(
                "tool host %r at %s does not answer ListTools %s(%s); its tools are learned when it does",
                self.host.name,
                self.host.address,
                "over mTLS " if self.host.secured else "",
                error,
            )

    async def _until_ready(self, timeout_s: float) -> None:
        """Wait until the host's channel connects, or ``timeout_s``."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self.host.channel.channel_ready()

    async def _until_reappeared(self, timeout_s: float) -> bool:
        """Wait until the channel lost its connection and made a new one; False after ``timeout_s``.

        A channel whose host went away goes IDLE and stays so until asked: it is asked to connect
        again, so a host that comes back is seen within the reconnect backoff (at most a second).
        """
        channel = self.host.channel
        lost = False
        try:
            async with asyncio.timeout(timeout_s):
                state = channel.get_state(try_to_connect=False)
                while True:
                    if state is grpc.ChannelConnectivity.READY:
                        if lost:
                            return True
                    else:
                        lost = True
                    if state is grpc.ChannelConnectivity.IDLE:
                        state = channel.get_state(try_to_connect=True)
                    await channel.wait_for_state_change(state)
                    state = channel.get_state(try_to_connect=False)
        except TimeoutError:
            return False


async def list_tools(host: HostChannel, *, timeout_s: float, wait_for_ready: bool) -> list[tool_pb2.ToolSpec]:
    """One ListTools on the host's current channel.

    Raises:
        grpc.aio.AioRpcError: no answer (unreachable, deadline, refused).
    """
    reply = await host.stub().ListTools(
        svc.ListToolsRequest(), timeout=timeout_s, wait_for_ready=wait_for_ready
    )
    return list(reply.tools)


def rpc_error_text(exc: grpc.aio.AioRpcError) -> str:
    """A failed RPC for the log: its code and details (never read by code)."""
    return f"{exc.code().name} {exc.details()}"
