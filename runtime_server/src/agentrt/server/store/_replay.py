"""What a stream follower reads: a run's row and a page of its events, in one transaction.

A page is bounded in rows and in bytes. The byte bound comes from the stored payload sizes,
read first, so a page of large events is cut before any of them is loaded. A follower that
starts (or comes back from the live bus) needs the row too: reading both in one transaction
costs one round trip of BEGIN/COMMIT instead of three, and the page is read after the row.

The statements are driver SQL: building SQLAlchemy expressions per page cost more than
running them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection

from agentrt.server.store._appends import for_paramstyle
from agentrt.server.store._crypt import RecordCipher
from agentrt.server.store._records import RunRecord, StoredEvent
from agentrt.server.store._schema import runs

__all__ = ["EVENTS_SQL", "RUN_SQL", "SIZES_SQL", "EventPage", "page_rows", "read_page", "read_run"]

_RUN = f"SELECT {', '.join(c.name for c in runs.c)} FROM runs WHERE run_id = :run_id"
_AFTER = "FROM run_events WHERE run_id = :run_id AND seq > :after_seq ORDER BY seq LIMIT :limit"
_SIZES = f"SELECT length(payload) {_AFTER}"
_EVENTS = f"SELECT run_id, seq, type, payload, created_ms {_AFTER}"
# The same statements, for a reader that runs them on the driver itself (``_pg_reads``).
RUN_SQL, SIZES_SQL, EVENTS_SQL = _RUN, _SIZES, _EVENTS


@dataclass(frozen=True, slots=True)
class EventPage:
    """Events after a seq, in order; ``more`` when events after them were left for the next page."""

    events: list[StoredEvent]
    more: bool


def read_run(conn: Connection, crypt: RecordCipher, run_id: str) -> RunRecord | None:
    row = conn.exec_driver_sql(for_paramstyle(_RUN, conn.dialect.paramstyle), {"run_id": run_id}).first()
    return crypt.run(row) if row is not None else None


def read_page(
    conn: Connection, crypt: RecordCipher, run_id: str, *, after_seq: int, max_rows: int, max_bytes: int
) -> EventPage:
    """Up to ``max_rows`` events after ``after_seq`` whose payloads add up to at most ``max_bytes``.

    The first event is always taken, whatever its size: a page never comes back empty while
    events remain.
    """
    paramstyle = conn.dialect.paramstyle
    params = {"run_id": run_id, "after_seq": after_seq, "limit": max_rows}
    sizes = [size for (size,) in conn.exec_driver_sql(for_paramstyle(_SIZES, paramstyle), params)]
    rows, more = page_rows(sizes, max_rows=max_rows, max_bytes=max_bytes)
    if not rows:
        return EventPage([], more)
    found = conn.exec_driver_sql(for_paramstyle(_EVENTS, paramstyle), dict(params, limit=rows))
    return EventPage([crypt.event(row) for row in found], more)


def page_rows(sizes: Sequence[int | None], *, max_rows: int, max_bytes: int) -> tuple[int, bool]:
    """How many of the events whose stored sizes are ``sizes`` (the first ``max_rows`` after the
    page's start) make the page, and whether more follow it. The first is always taken."""
    rows, total = 0, 0
    for size in sizes:
        size = int(size or 0)
        if rows and total + size > max_bytes:
            break
        rows, total = rows + 1, total + size
    # More after this page: it was cut by bytes, or the size query hit its row limit.
    return rows, len(sizes) > rows or len(sizes) == max_rows
