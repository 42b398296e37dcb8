"""Which event loop a server process runs on: uvloop when asked for or available, else asyncio.

Both ``agentrt serve`` (``event_loop`` setting) and ``agentrt toolhost`` (``--event-loop``) pick
with :func:`resolve_loop` and run with :func:`run_on`. The choice is made once at start, through
``asyncio.Runner(loop_factory=...)``: the event-loop-policy API is deprecated from Python 3.14.

Errors::

    EventLoopError          the choice cannot be honoured (exit 2 at start)
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final, Literal, TypeVar, get_args

__all__ = [
    "EVENT_LOOP_CHOICES",
    "EventLoopChoice",
    "EventLoopError",
    "LoopPlan",
    "resolve_loop",
    "run_on",
]

EventLoopChoice = Literal["auto", "uvloop", "asyncio"]
EVENT_LOOP_CHOICES: Final[tuple[str, ...]] = get_args(EventLoopChoice)

_T = TypeVar("_T")


class EventLoopError(Exception):
    """The event loop asked for cannot be used: an unknown name, or uvloop is not installed."""

    def __init__(self, message: str, *, choice: str) -> None:
        super().__init__(message)
        self.choice = choice


@dataclass(frozen=True)
class LoopPlan:
    """The loop a process will run: its name, what makes it (None: asyncio's default) and why."""

    name: Literal["uvloop", "asyncio"]
    factory: Callable[[], asyncio.AbstractEventLoop] | None
    detail: str  # for the startup log line: the uvloop version, or why asyncio


def resolve_loop(
    choice: str,
    *,
    extra: str,
    import_module: Callable[[str], ModuleType] = importlib.import_module,
) -> LoopPlan:
    """Decide the event loop for ``choice`` (``auto``, ``uvloop`` or ``asyncio``).

    ``auto`` takes uvloop when it imports, else asyncio; ``uvloop`` insists on it.

    Args:
        choice: The configured value.
        extra: The distribution extra that installs uvloop, named in the error
            (``agentrt-server[uvloop]``).
        import_module: How uvloop is imported; tests pass one that fails.

    Raises:
        EventLoopError: ``choice`` is none of the three, or it is ``uvloop`` and uvloop does not import.
    """
    if choice not in EVENT_LOOP_CHOICES:
        raise EventLoopError(
            f"unknown event loop {choice!r}: choose one of {', '.join(EVENT_LOOP_CHOICES)}", choice=choice
        )
    if choice == "asyncio":
        return LoopPlan(name="asyncio", factory=None, detail="as configured")
    try:
        uvloop = import_module("uvloop")
    except ImportError as exc:
        if choice == "uvloop":
            raise EventLoopError(
                f"event loop 'uvloop' is configured but uvloop does not import ({exc}): "
                f"install the extra, pip install '{extra}', or choose 'auto' or 'asyncio'",
                choice=choice,
            ) from exc
        return LoopPlan(name="asyncio", factory=None, detail="uvloop not installed")
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    version = getattr(uvloop, "__version__", "?")
    return LoopPlan(name="uvloop", factory=factory, detail=f"uvloop {version}")


def run_on(plan: LoopPlan, main: Coroutine[Any, Any, _T], *, log: logging.Logger) -> _T:
    """Run ``main`` to completion on a new loop of ``plan``, logging once which loop that is.

    Like :func:`asyncio.run` (which is this with the default factory): Ctrl-C cancels ``main``
    and re-raises KeyboardInterrupt; leftover tasks are cancelled and async generators closed.
    """
    with asyncio.Runner(loop_factory=plan.factory) as runner:
        loop = runner.get_loop()
        # The loop's own class, not only the plan: what actually runs is what operators need to see.
        log.info("event loop: %s (%s, %s)", plan.name, plan.detail, type(loop).__module__)
        return runner.run(main)
