"""Event streams returned by the clients: plain iterators that stop early without cancelling the run.

The cleanup tail: a run whose end left cleanups UNKNOWN gets, after ``run.ended``, the records
of the server's cleanup job (``cleanup.started``/``completed``/``failed``), closed by
``cleanup.settled``. A stream that reaches such a run while its tail is open delivers the
stream-only ``run.waiting`` with reason ``WAIT_REASON_CLEANUP``: RunAgent and non-follow streams
end there; a follow stream goes on with the tail, unless it was opened with
``cleanup_tail=False``, which stops it there (the run's outcome is final at ``run.ended``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Iterator, Sequence
from types import TracebackType
from typing import Any, Protocol, Self

import grpc
import grpc.aio

from agentrt.client import _errors
from agentrt.proto.runtime.v1 import run_pb2


class _HasEvents(Protocol):
    # RunAgentResponse and StreamRunEventsResponse both carry one RunEvent, or (asked for with
    # batch_events, as these clients do) several in ``events``.
    @property
    def event(self) -> run_pb2.RunEvent: ...

    @property
    def events(self) -> Sequence[run_pb2.RunEvent]: ...


def _unpacked(response: _HasEvents, into: deque[run_pb2.RunEvent]) -> run_pb2.RunEvent:
    """The response's first event; the rest of a batch go to ``into``, in order."""
    if not response.events:
        return response.event
    first, *rest = response.events
    into.extend(rest)
    return first


def is_tail_mark(event: run_pb2.RunEvent) -> bool:
    """True for the ``run.waiting`` that says a run has ended with its cleanup tail still open."""
    return (
        event.WhichOneof("event") == "run_waiting" and event.run_waiting.reason == run_pb2.WAIT_REASON_CLEANUP
    )


class _Ending:
    """Why a stream ended, from its last items.

    A stream that ends without error ended for one of these reasons: the run ended and its log
    is complete (``run.ended``, or ``cleanup.settled`` after it); the run ended with its cleanup
    tail open (``run.ended`` set, and ``waiting`` has reason ``WAIT_REASON_CLEANUP``: the cleanup
    job has more to record); the run waits for something outside itself (a RunAgent stream's
    last item is the stream-only ``run.waiting``: an approval, a budget grant, an unknown
    outcome, or an earlier turn of its session); or a non-follow replay reached the end of what
    is stored (neither is set).
    """

    def __init__(self) -> None:
        self.ended: run_pb2.RunEnded | None = None
        self.waiting: run_pb2.RunWaiting | None = None
        self.settled: run_pb2.CleanupSettled | None = None
        self.last_seq = 0

    def note(self, event: run_pb2.RunEvent) -> run_pb2.RunEvent:
        kind = event.WhichOneof("event")
        if kind == "run_ended":
            self.ended = event.run_ended
        elif kind == "run_waiting":
            self.waiting = event.run_waiting
        elif kind == "cleanup_settled":
            self.settled = event.cleanup_settled
            self.waiting = None  # the tail it marked is closed
        if event.seq:
            self.last_seq = event.seq
        return event

    @property
    def tail_open(self) -> bool:
        return self.waiting is not None and self.waiting.reason == run_pb2.WAIT_REASON_CLEANUP


class EventStream(Iterator[run_pb2.RunEvent]):
    """Events of one server stream, for the synchronous :class:`Client`.

    Iterate it to get :class:`run_pb2.RunEvent` objects until the server ends the
    stream. Use it as a context manager (or call :meth:`cancel`) to stop early;
    stopping a stream never cancels the run. Once it is over, :attr:`ended` or
    :attr:`waiting` says why (see :class:`_Ending`).

    Raises:
        RPCError: From iteration, when the stream ends with an error (e.g.
            RESOURCE_EXHAUSTED ``FOLLOWER_STALLED`` for a reader that stopped reading:
            resume with ``stream_events(after_seq=<last seq received>)``).
    """

    def __init__(
        self, call: grpc.CallIterator[Any], *, hint: _errors.Hint | None = None, cleanup_tail: bool = True
    ) -> None:
        self._call = call
        self._hint = hint
        self._it = iter(call)
        self._cancelled = False
        self._ending = _Ending()
        self._cleanup_tail = cleanup_tail
        self._stop_next = False
        self._pending: deque[run_pb2.RunEvent] = deque()  # the rest of a batch

    @property
    def ended(self) -> run_pb2.RunEnded | None:
        """The run's ``run.ended`` if the stream delivered it: the run is over."""
        return self._ending.ended

    @property
    def waiting(self) -> run_pb2.RunWaiting | None:
        """The ``run.waiting`` a RunAgent stream ended with: what the run now waits for (for an
        ended run, ``WAIT_REASON_CLEANUP``: its cleanup tail is open; cleared by cleanup.settled)."""
        return self._ending.waiting

    @property
    def tail_open(self) -> bool:
        """True when the stream reached the run's end while the cleanup job still had cleanups to
        release, and saw no ``cleanup.settled`` after: the run's log is not complete yet."""
        return self._ending.tail_open

    @property
    def settled(self) -> run_pb2.CleanupSettled | None:
        """The ``cleanup.settled`` that closed the run's cleanup tail, if the stream delivered it."""
        return self._ending.settled

    @property
    def last_seq(self) -> int:
        """The last persisted seq received: where to resume with ``stream_events``."""
        return self._ending.last_seq

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> run_pb2.RunEvent:
        if self._stop_next and not self._cancelled:
            self.cancel()  # asked not to follow the cleanup tail: the run's outcome is known
        if self._cancelled:
            raise StopIteration
        if self._pending:
            event = self._pending.popleft()
        else:
            try:
                event = _unpacked(next(self._it), self._pending)
            except grpc.RpcError as exc:
                if self._cancelled:
                    raise StopIteration from None
                raise _errors.from_call(exc, hint=self._hint) from exc
        self._stop_next = not self._cleanup_tail and is_tail_mark(event)
        return self._ending.note(event)

    def cancel(self) -> None:
        """Closes the stream; later iteration stops. The run goes on."""
        self._cancelled = True
        self._call.cancel()  # type: ignore[no-untyped-call]  # grpc-stubs leaves cancel() unannotated

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cancel()


class AsyncEventStream(AsyncIterator[run_pb2.RunEvent]):
    """Events of one server stream, for :class:`AsyncClient`.

    ``async for`` over it to get :class:`run_pb2.RunEvent` objects until the server
    ends the stream. Use ``async with`` (or call :meth:`aclose`) to stop early;
    stopping a stream never cancels the run. Once it is over, :attr:`ended` or
    :attr:`waiting` says why.

    Raises:
        RPCError: From iteration, when the stream ends with an error (e.g.
            RESOURCE_EXHAUSTED ``FOLLOWER_STALLED``; resume after :attr:`last_seq`).
    """

    def __init__(
        self,
        call: grpc.aio.UnaryStreamCall[Any, Any],
        *,
        hint: _errors.Hint | None = None,
        cleanup_tail: bool = True,
    ) -> None:
        self._call = call
        self._hint = hint
        self._it = call.__aiter__()
        self._cancelled = False
        self._ending = _Ending()
        self._cleanup_tail = cleanup_tail
        self._stop_next = False
        self._pending: deque[run_pb2.RunEvent] = deque()  # the rest of a batch

    @property
    def ended(self) -> run_pb2.RunEnded | None:
        """The run's ``run.ended`` if the stream delivered it: the run is over."""
        return self._ending.ended

    @property
    def waiting(self) -> run_pb2.RunWaiting | None:
        """The ``run.waiting`` a RunAgent stream ended with: what the run now waits for (for an
        ended run, ``WAIT_REASON_CLEANUP``: its cleanup tail is open; cleared by cleanup.settled)."""
        return self._ending.waiting

    @property
    def tail_open(self) -> bool:
        """True when the stream reached the run's end while the cleanup job still had cleanups to
        release, and saw no ``cleanup.settled`` after: the run's log is not complete yet."""
        return self._ending.tail_open

    @property
    def settled(self) -> run_pb2.CleanupSettled | None:
        """The ``cleanup.settled`` that closed the run's cleanup tail, if the stream delivered it."""
        return self._ending.settled

    @property
    def last_seq(self) -> int:
        """The last persisted seq received: where to resume with ``stream_events``."""
        return self._ending.last_seq

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> run_pb2.RunEvent:
        if self._stop_next and not self._cancelled:
            self.cancel()  # asked not to follow the cleanup tail: the run's outcome is known
        if self._cancelled:
            raise StopAsyncIteration
        if self._pending:
            event = self._pending.popleft()
        else:
            try:
                event = _unpacked(await anext(self._it), self._pending)
            except grpc.aio.AioRpcError as exc:
                raise await _errors.from_aio_call(self._call, exc, hint=self._hint) from exc
        self._stop_next = not self._cleanup_tail and is_tail_mark(event)
        return self._ending.note(event)

    def cancel(self) -> None:
        """Cancels the stream's call; later iteration stops. The run goes on."""
        self._cancelled = True
        self._call.cancel()

    async def aclose(self) -> None:
        """Cancels the stream's call and releases it."""
        self.cancel()
        aclose = getattr(self._it, "aclose", None)
        if aclose is not None:
            await aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
