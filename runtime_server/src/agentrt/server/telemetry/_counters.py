"""Process counters named in R10.3; read by tests and logged at shutdown."""

from __future__ import annotations

from collections import Counter

COUNTER_NAMES: tuple[str, ...] = (
    "runs_started",
    "runs_ended",
    "steps",
    "retry_count",
    "retry_exhausted_count",
    "timeout_count",
    "cancel_requested_count",
    "unknown_result_count",
    "cleanup_failed_count",
    "duplicate_suppressed_count",
    "partial_run_count",
    "lease_lost_count",
    "run_fault_count",  # run.fault events written: exceptions contained while driving a run
    "environmental_fault_count",  # database, network or OS failures retried without a run.fault
    "recheck_veto_count",  # approved calls a re-check vetoed before they ran
    "variables_refused_count",  # tool results whose run variables were refused (too many, secret-like)
    "escalated_count",  # run.escalated events written: waits that need a person
    "cleanup_refused_count",  # cleanup registrations refused (malformed, untrusted tool)
    "cleanup_recovered_count",  # given-up cleanups the cleanup job released later
    "unknown_handed_over_count",  # cancelled runs ended with a write nobody can tell, for a person
)


class Counters:
    """Monotonic counters of one runtime process."""

    def __init__(self) -> None:
        self._values: Counter[str] = Counter({name: 0 for name in COUNTER_NAMES})

    def inc(self, name: str, amount: int = 1) -> None:
        if name not in self._values:
            raise KeyError(f"unknown counter {name!r}")
        self._values[name] += amount

    def get(self, name: str) -> int:
        return self._values[name]

    def snapshot(self) -> dict[str, int]:
        return dict(self._values)
