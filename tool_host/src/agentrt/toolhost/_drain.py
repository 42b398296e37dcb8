"""A tool host's drain on SIGTERM: refuse new calls, let the calls in flight finish, within a bound.

The gRPC server stays up while it drains, so GetOperation, CancelOperation and ListTools are still
answered (a runtime asking what a write did gets the ledger's answer, not a dead socket); only
InvokeTool is refused, with UNAVAILABLE ``DRAINING`` before anything is recorded or run.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from agentrt.toolhost._status import Draining

__all__ = ["CallDrain"]


class CallDrain:
    """Counts the InvokeTool calls in flight and, once draining, refuses new ones."""

    def __init__(self) -> None:
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._refusal: Draining | None = None

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """Around one InvokeTool.

        Raises:
            Draining: the host is draining; the call was not taken.
        """
        if self._refusal is not None:
            raise self._refusal
        self._in_flight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    def begin(self, *, retry_after_s: float) -> None:
        """From now on new calls are refused, retryably."""
        self._refusal = Draining(retry_after_s=retry_after_s)

    async def wait_idle(self, within: float | None) -> bool:
        """Until no call is in flight, for at most ``within`` seconds (None: no bound); True when idle."""
        try:
            async with asyncio.timeout(within):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True
