"""The step loop's fenced append as driver SQL (portable SQLite/PostgreSQL path).

Building SQLAlchemy expressions per commit cost more than the commit itself, so the
two statements are plain SQL whose named parameters are rewritten per dialect.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any, Protocol

from sqlalchemy import Connection, delete

from agentrt.server.store._schema import runs, signals


class PendingAppend(Protocol):
    run_id: str
    expected_revision: int
    owner: str
    rows: list[dict[str, Any]]
    values: dict[str, Any]
    consume_signals: Sequence[int]


# The step loop's statements as driver SQL: building SQLAlchemy expressions per commit
# cost more than the commit itself. Named parameters are rewritten per dialect.
_INSERT_EVENT = (
    "INSERT INTO run_events (run_id, seq, type, payload, created_ms) "
    "VALUES (:run_id, :seq, :type, :payload, :created_ms)"
)


@functools.lru_cache(maxsize=64)
def _fenced_update_sql(columns: tuple[str, ...], paramstyle: str) -> str:
    unknown = [c for c in columns if c not in runs.c]
    if unknown:
        raise ValueError(f"not columns of runs: {unknown}")
    sets = ", ".join(f"{c} = :{c}" for c in columns)
    fence = "run_id = :w_run_id AND revision = :w_revision AND lease_owner = :w_owner"
    sql = f"UPDATE runs SET {sets} WHERE {fence}"
    return for_paramstyle(sql, paramstyle)


@functools.lru_cache(maxsize=64)
def for_paramstyle(sql: str, paramstyle: str) -> str:
    return re.sub(r":(\w+)", r"%(\1)s", sql) if paramstyle == "pyformat" else sql


def write_batch(conn: Connection, batch: Sequence[PendingAppend]) -> list[bool]:
    paramstyle = conn.dialect.paramstyle
    fenced: list[bool] = []
    rows: list[dict[str, Any]] = []
    for item in batch:
        sql = _fenced_update_sql(tuple(sorted(item.values)), paramstyle)
        params = {
            **item.values,
            "w_run_id": item.run_id,
            "w_revision": item.expected_revision,
            "w_owner": item.owner,
        }
        ok = conn.exec_driver_sql(sql, params).rowcount == 1
        fenced.append(ok)
        if ok:
            rows.extend(item.rows)
            if item.consume_signals:
                conn.execute(delete(signals).where(signals.c.id.in_(list(item.consume_signals))))
    if rows:
        conn.exec_driver_sql(for_paramstyle(_INSERT_EVENT, paramstyle), rows)
    return fenced
