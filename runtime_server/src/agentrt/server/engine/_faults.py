"""Fault injection: a TEST FACILITY that hard-exits the process at a named commit point.

Off unless ``AGENTRT_FAULT_POINT`` is set (a comma-separated list). Each entry is
``POINT``, ``POINT@N`` (fire on the N-th time the point is reached, default 1),
``POINT@N..M`` (the N-th to the M-th time) or ``POINT@N..`` (every time from the N-th):

- ``before_commit:<event type>`` / ``after_commit:<event type>``: around the commit
  whose batch carries that event, e.g. ``after_commit:model.completed``;
- ``tool_before_send``: a call's tool.started is committed and the lease checked; the
  request has not left;
- ``tool_request_sent``: a tool call has left (the tool host may be running it);
- ``tool_response_received``: the tool host answered; nothing is recorded yet;
- ``after_model_response``: the model answered; its output is not recorded yet;
- ``cleanup_response_received``: a cleanup attempt was answered; nothing is recorded yet;
- ``retention_before_commit`` / ``retention_after_commit``: around the commit of one
  retention batch (in the server's job or ``agentrt prune``).

The default action is ``os._exit(FAULT_EXIT_CODE)``: no cleanup, no flush, no lease
release, exactly like a crash. ``POINT=stop`` instead stops the process with SIGSTOP
(a long GC pause or a frozen VM, from the process's point of view) until someone
sends SIGCONT. ``POINT=raise`` raises :class:`InjectedFault` in the run's driver
instead: a bug in the step loop, which the engine must contain as a ``run.fault``.
``POINT=outage`` raises :class:`InjectedOutage`, a ``ConnectionError``: the environment
failing there (the engine retries it without counting a fault, within
``faults.environmental_retry_s``). Never set this in production.
"""

from __future__ import annotations

import math
import os
import signal
import sys
from collections import Counter
from collections.abc import Iterable

FAULT_ENV = "AGENTRT_FAULT_POINT"
FAULT_EXIT_CODE = 86


class InjectedFault(RuntimeError):
    """Raised at a fault point armed with ``=raise``."""


class InjectedOutage(ConnectionError):
    """Raised at a fault point armed with ``=outage``: an environmental failure, by its type."""


class FaultPlan:
    """Which points crash the process; ``hit`` is a no-op for every other point."""

    def __init__(self, spec: str = ""):
        self._targets: dict[str, tuple[int, float]] = {}  # point -> (first, last) hit that fires
        self._actions: dict[str, str] = {}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            item, _, action = item.partition("=")
            point, _, nth = item.partition("@")
            first, dots, last = (nth or "1").partition("..")
            self._targets[point] = (int(first), (float(last) if last else math.inf) if dots else int(first))
            self._actions[point] = action
        self._seen: Counter[str] = Counter()

    @classmethod
    def from_env(cls) -> FaultPlan:
        return cls(os.environ.get(FAULT_ENV, ""))

    @property
    def armed(self) -> bool:
        return bool(self._targets)

    def hit(self, point: str) -> None:
        """Crash here if this point (at this count) is armed."""
        if point not in self._targets:
            return
        self._seen[point] += 1
        first, last = self._targets[point]
        if not first <= self._seen[point] <= last:
            return
        action = self._actions.get(point, "")
        if action == "raise":
            raise InjectedFault(f"fault injection at {point}")
        if action == "outage":
            raise InjectedOutage(f"fault injection (outage) at {point}")
        if action == "stop":
            print(f"agentrt: fault injection at {point}; stopping", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
            return
        print(f"agentrt: fault injection at {point}; exiting", file=sys.stderr, flush=True)
        os._exit(FAULT_EXIT_CODE)

    def around_commit(self, when: str, event_types: Iterable[str]) -> None:
        if self._targets:
            for event_type in dict.fromkeys(event_types):
                self.hit(f"{when}_commit:{event_type}")
