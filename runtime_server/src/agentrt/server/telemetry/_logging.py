"""The runtime's logs: setup from flags, env and ``[logging]``, and the run's story lines.

The formatter, the redactor and the contextvars live in ``agentrt.toolhost.logs`` (the tool
host logs the same way and must not import the runtime). This module adds what only the runtime
has: settings, and the ``agentrt.run`` logger, which says one INFO line per state transition of a
run (an event that moves its phase, and its start) and per retry, timeout and cancel decision.
The ids come from the context: the run's driver binds ``run_id`` and ``tenant``, a tool call
``call_id``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from agentrt.server.config import LoggingConfig
from agentrt.server.store import environmental
from agentrt.toolhost.logs import (
    FORMAT_ENV,
    LogFormat,
    configure_logging,
    log_fields,
    parse_level_spec,
    resolve_format,
)

__all__ = [
    "FORMAT_ENV",
    "RunStory",
    "active_format",
    "decision",
    "log_failure",
    "logs_call",
    "resolve_format",
    "run_log",
    "setup_logging",
    "transition",
]

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")

run_log = logging.getLogger("agentrt.run")


def setup_logging(
    config: LoggingConfig,
    *,
    log_format: str | None = None,
    log_level: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Configure the process's logging: flags over ``AGENTRT_LOG_FORMAT`` over ``[logging]``.

    ``log_level`` is ``--log-level``: a level for the root logger, ``logger=LEVEL`` pairs, or both
    (``WARNING,agentrt.run=INFO``); its pairs go on top of ``[logging] levels``.

    Raises:
        ValueError: an unknown format or level.
    """
    global _active
    root, named = parse_level_spec(log_level or "")
    chosen = resolve_format(log_format, config.format, environ)
    configure_logging(
        log_format=chosen,
        level=root or config.level,
        levels={**config.levels, **named},
        redact_fields=config.redact_fields,
    )
    _active = chosen


_active: LogFormat = "text"


def active_format() -> LogFormat:
    """The format :func:`setup_logging` chose: tool hosts the runtime spawns log the same way."""
    return _active


def log_failure(logger: logging.Logger, exc: BaseException, message: str, *args: object) -> None:
    """Log a failed background pass: an environmental blip (the database or Redis went away) is
    one WARNING line with the error's type and kind and no traceback, which would only repeat the
    driver's internals (and may quote a URL's credentials); anything else is a bug, logged with
    its traceback."""
    kind = environmental(exc)
    if kind is None:
        logger.error(message, *args, exc_info=exc)
    else:
        logger.warning(f"{message}: %s (%s)", *args, type(exc).__name__, kind.value)


def transition(before: str, after: str, event_type: str, **fields: Any) -> None:
    """One INFO line for a run's event: its move from phase ``before`` ("" at its start) to ``after``."""
    extra = {"event": event_type, "from_phase": before, "to_phase": after, **fields}
    moved = f"{before} -> {after}" if before and before != after else f"in {after}"
    tool = f" {fields['tool']}" if fields.get("tool") else ""
    run_log.info("%s%s (%s)", event_type, tool, moved, extra=extra)


class _Event(Protocol):
    @property
    def type_name(self) -> str: ...


# Told whether or not the phase moves: decisions carried out by adding one event (a model step's
# retry stays MODEL_STEP) and a tool call's start and end (a run's story without them skips its
# calls: the phase stays TOOL_STEP). Each event is told once, here.
_STORY_EVENTS = frozenset(
    {
        "retry.scheduled",
        "run.fault",  # the faulted attempt is retried from the last commit (or the run ends)
        "cancel.requested",
        "tool.outcome.unknown",
        "outcome.resolved",
        "run.escalated",
        "tool.started",
        "tool.completed",
        "tool.failed",
        "handoff",
        "approval.requested",
        "approval.resolved",
    }
)
_EVENT_FIELDS = ("step", "call_id", "tool", "attempt", "delay", "reason")
# In a commit made from the row alone, the first of these moves the run to the row's new phase.
_MOVING_EVENTS = frozenset(
    {"run.completed", "run.failed", "run.cancelled", "run.closing", "tool.outcome.unknown", "run.ended"}
)


class RunStory:
    """A run's story lines for the events added since its last commit, told once they commit.

    ``RunContext.add`` notes every event with the phases around it; ``RunContext.flush`` tells
    what it committed, so a commit that never lands (a lost lease) tells nothing.
    """

    __slots__ = ("_lines", "_run_id")

    def __init__(self, run_id: str) -> None:
        self._run_id = run_id  # the lines name their run even where no driver bound it (cleanup job)
        self._lines: list[tuple[str, str, str, dict[str, Any]]] = []

    def note(self, event: _Event, before: str, after: str) -> None:
        """Keep a line for ``event`` if it moved the phase, carries out a decision or is a call's."""
        if before != after or event.type_name in _STORY_EVENTS:
            fields = {k: v for k in _EVENT_FIELDS if (v := getattr(event, k, None)) not in (None, "")}
            self._lines.append((before, after, event.type_name, {"run_id": self._run_id, **fields}))

    def note_row_commit(self, before: str, after: str | None, events: Iterable[_Event]) -> None:
        """Keep the lines of a commit made from the row alone: its phase goes from ``before`` to
        ``after`` (None: unchanged) at the first event that ends the run or makes it wait."""
        phase = before
        for event in events:
            moved = after if after and phase != after and event.type_name in _MOVING_EVENTS else phase
            self.note(event, phase, moved)
            phase = moved

    def tell(self) -> None:
        """Log the kept lines, in order, and forget them."""
        for before, after, event_type, fields in self._lines:
            transition(before, after, event_type, **fields)
        self._lines.clear()


def logs_call(
    method: Callable[Concatenate[S, Any, P], Awaitable[R]],
) -> Callable[Concatenate[S, Any, P], Awaitable[R]]:
    """Decorate a step method whose first argument is a call: its lines carry that ``call_id``."""

    @functools.wraps(method)
    async def logged(self: S, call: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with log_fields(call_id=call.call_id):
            return await method(self, call, *args, **kwargs)

    return logged


def decision(kind: str, message: str, *args: object, **fields: Any) -> None:
    """One INFO line for a retry, timeout or cancel decision carried out (``kind``: what it was)."""
    run_log.info(message, *args, extra={"decision": kind, **fields})
