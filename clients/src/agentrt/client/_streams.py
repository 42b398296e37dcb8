"""Event streams returned by the clients: plain iterators that stop early without cancelling the run."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from types import TracebackType
from typing import Any, Protocol, Self

import grpc
import grpc.aio

from agentrt.client import _errors
from agentrt.proto.runtime.v1 import run_pb2


class _HasEvent(Protocol):
    # RunAgentResponse and StreamRunEventsResponse both wrap one RunEvent.
    @property
    def event(self) -> run_pb2.RunEvent: ...


class _Ending:
    """Why a stream ended, from its last items.

    A stream that ends without error ended for one of three reasons: the run ended
    (``run.ended``), the run waits for something outside itself (a RunAgent stream's last
    item is the stream-only ``run.waiting``: an approval, a budget grant, an unknown
    outcome, or an earlier turn of its session), or a non-follow replay reached the end
    of what is stored (neither is set).
    """

    def __init__(self) -> None:
        self.ended: run_pb2.RunEnded | None = None
        self.waiting: run_pb2.RunWaiting | None = None
        self.last_seq = 0

    def note(self, event: run_pb2.RunEvent) -> run_pb2.RunEvent:
        kind = event.WhichOneof("event")
        if kind == "run_ended":
            self.ended = event.run_ended
        elif kind == "run_waiting":
            self.waiting = event.run_waiting
        if event.seq:
            self.last_seq = event.seq
        return event


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

    def __init__(self, call: grpc.CallIterator[Any], *, hint: _errors.Hint | None = None) -> None:
        self._call = call
        self._hint = hint
        self._it = iter(call)
        self._cancelled = False
        self._ending = _Ending()

    @property
    def ended(self) -> run_pb2.RunEnded | None:
        """The run's ``run.ended`` if the stream delivered it: the run is over."""
        return self._ending.ended

    @property
    def waiting(self) -> run_pb2.RunWaiting | None:
        """The ``run.waiting`` a RunAgent stream ended with: what the run now waits for."""
        return self._ending.waiting

    @property
    def last_seq(self) -> int:
        """The last persisted seq received: where to resume with ``stream_events``."""
        return self._ending.last_seq

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> run_pb2.RunEvent:
        if self._cancelled:
            raise StopIteration
        try:
            response: _HasEvent = next(self._it)
        except grpc.RpcError as exc:
            if self._cancelled:
                raise StopIteration from None
            raise _errors.from_call(exc, hint=self._hint) from exc
        return self._ending.note(response.event)

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

    def __init__(self, call: grpc.aio.UnaryStreamCall[Any, Any], *, hint: _errors.Hint | None = None) -> None:
        self._call = call
        self._hint = hint
        self._it = call.__aiter__()
        self._cancelled = False
        self._ending = _Ending()

    @property
    def ended(self) -> run_pb2.RunEnded | None:
        """The run's ``run.ended`` if the stream delivered it: the run is over."""
        return self._ending.ended

    @property
    def waiting(self) -> run_pb2.RunWaiting | None:
        """The ``run.waiting`` a RunAgent stream ended with: what the run now waits for."""
        return self._ending.waiting

    @property
    def last_seq(self) -> int:
        """The last persisted seq received: where to resume with ``stream_events``."""
        return self._ending.last_seq

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> run_pb2.RunEvent:
        if self._cancelled:
            raise StopAsyncIteration
        try:
            response: _HasEvent = await anext(self._it)
        except grpc.aio.AioRpcError as exc:
            raise await _errors.from_aio_call(self._call, exc, hint=self._hint) from exc
        return self._ending.note(response.event)

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
