"""What a running tool sees of its call: identity, deadline and cancellation."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from pathlib import Path

__all__ = ["CancellationSignal", "ToolContext"]

DEFAULT_DATA_DIR = Path(".agentrt/toolhost")


class CancellationSignal:
    """A one-shot cancellation flag usable from async tools and from worker threads.

    Async tools ``await signal.wait()``; sync tools (which run in a worker thread)
    poll :meth:`is_set` or block on :attr:`threading_event`. :meth:`set` may be
    called from any thread.
    """

    def __init__(self) -> None:
        self._flag = threading.Event()
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    @property
    def threading_event(self) -> threading.Event:
        """The underlying thread-safe event, for sync tools (``ctx.cancelled.threading_event.wait(t)``)."""
        return self._flag

    def is_set(self) -> bool:
        """Return True once cancellation was requested."""
        return self._flag.is_set()

    def set(self) -> None:
        """Request cancellation and wake every waiter; thread-safe and idempotent."""
        with self._lock:
            self._flag.set()
            waiters = list(self._waiters)
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for loop, event in waiters:
            if loop is running:
                event.set()
            elif not loop.is_closed():
                # asyncio.Event is not thread-safe: wake it from its own loop.
                loop.call_soon_threadsafe(event.set)

    async def wait(self) -> None:
        """Return once cancellation was requested."""
        if self._flag.is_set():
            return
        entry = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            # Checked again under the lock so a concurrent set() cannot be missed.
            if self._flag.is_set():
                return
            self._waiters.append(entry)
        try:
            await entry[1].wait()
        finally:
            with self._lock:
                self._waiters.remove(entry)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToolContext:
    """Per-call context handed to a tool next to its arguments.

    The host builds one per invocation from the call metadata (R3.3). Tests of a
    tool can build one directly.

    Attributes:
        idempotency_key: Stable key of the call (``x-agentrt-idempotency-key``); use it
            to make external effects idempotent. Unique within ``tenant`` only: a plugin
            keeping its own store keys it by ``(tenant, idempotency_key)``.
        tenant: The tenant the call acts for, from its verified call grant; "" on a host
            that verifies no grants (loopback development).
        run_id: Run that made the call (``x-agentrt-run-id``), or "".
        call_id: Tool call id within the run (``x-agentrt-call-id``), or "".
        attempt: 1 for the first attempt, then 2, 3, ... (``x-agentrt-attempt``).
        fencing_token: The run's lease generation (``x-agentrt-fencing-token``), 0 if none.
        deadline: Absolute ``time.monotonic()`` value by which the tool must finish, or None.
        traceparent: W3C trace context of the caller, if any.
        data_dir: Directory where the host keeps its ledger and plugins keep their data.
        cancelled: Set when the caller cancelled the call or its deadline passed.
    """

    idempotency_key: str
    tenant: str = ""
    run_id: str = ""
    call_id: str = ""
    attempt: int = 1
    fencing_token: int = 0
    deadline: float | None = None
    traceparent: str | None = None
    data_dir: Path = DEFAULT_DATA_DIR
    cancelled: CancellationSignal = dataclasses.field(default_factory=CancellationSignal, compare=False)

    def remaining(self) -> float | None:
        """Return the seconds left before the deadline (never negative), or None without a deadline."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())

    def is_cancelled(self) -> bool:
        """Return True once the call was cancelled; thread-safe, for sync tools to poll."""
        return self.cancelled.is_set()

    async def wait_cancelled(self) -> None:
        """Return once the call is cancelled; for async tools (e.g. raced against work)."""
        await self.cancelled.wait()
