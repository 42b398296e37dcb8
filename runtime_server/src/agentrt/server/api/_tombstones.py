"""What the API answers for a run retention pruned (DESIGN R8.4).

GetRun and ListRuns show the tombstone: the run row with ``prune_time`` set, its phase, reason,
usage, fault count and times, but an empty input and output. Anything that needs the pruned
events or payloads (StreamRunEvents, RunAgent attaching by request key) is FAILED_PRECONDITION
with ErrorInfo reason ``RUN_PRUNED``: the run exists and the caller may see it, so NOT_FOUND
would be untrue, and a distinct reason tells a client not to retry.
"""

from __future__ import annotations

from agentrt.server.core import RunStateConflict, rfc3339
from agentrt.server.store import RunRecord

__all__ = ["refuse_pruned"]


def refuse_pruned(record: RunRecord) -> None:
    """Raise ``RUN_PRUNED`` when retention removed the run's events and payloads.

    Raises:
        RunStateConflict: The run is a tombstone.
    """
    if record.pruned_ms is None:
        return
    when = rfc3339(record.pruned_ms)
    raise RunStateConflict(
        f"run {record.run_id} was pruned by retention at {when}: its events and payloads are gone",
        reason="RUN_PRUNED",
        metadata={"run_id": record.run_id, "prune_time": when},
    )
