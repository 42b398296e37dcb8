"""Per-run statements as driver SQL: SQLAlchemy compiles each once, the driver runs it (issue 19).

``Connection.execute`` of a Core statement computes its cache key, looks the compiled form up
and builds a result around typed rows on every call: for the claim, larger than running it.
Here a statement is compiled once per dialect and size of its IN lists (SQLAlchemy's own
text, so the SQL is exactly what ``execute`` emitted, casts and all), and ``exec_driver_sql``
sends it with bound parameters over the connection SQLAlchemy already holds, in its
transaction. Values are never formatted into the text.

Parameters go through the dialect's bind processors as ``execute`` would send them. Results
are the driver's rows, untyped: callers read only columns the driver returns as Python wants
them (SQLite's booleans come back as integers: :func:`run_row` fixes those).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ClauseElement, Connection, CursorResult, insert
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.compiler import SQLCompiler

from agentrt.server.store._schema import events, runs

__all__ = ["DriverStatement", "driver_statement", "insert_events", "insert_run", "run_row"]


@dataclass(frozen=True, slots=True)
class DriverStatement:
    """One compiled statement: its text, and how a call's values become the driver's parameters."""

    sql: str
    #: Parameters the statement carries itself (the phases of an IN list, a ``+ 1``).
    fixed: Mapping[str, Any]
    #: Positional order for qmark drivers (SQLite); None: named parameters (psycopg).
    order: tuple[str, ...] | None
    #: The expanding parameters, whose lists become ``name_1 .. name_n``.
    expanding: tuple[str, ...] = ()
    #: What each call must bind (the expanding ones included).
    required: frozenset[str] = frozenset()
    #: The dialect's bind processors of a call's parameters, by name.
    processors: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)

    def bind(self, values: Mapping[str, Any]) -> dict[str, Any] | tuple[Any, ...]:
        """The driver's parameters for a call's ``values``.

        Raises:
            ValueError: a parameter the statement needs is missing (it would not bind as NULL).
        """
        if not self.required <= values.keys():
            raise ValueError(f"parameters missing: {sorted(self.required - values.keys())}")
        merged = dict(self.fixed)
        processors = self.processors
        for name, value in values.items():
            process = processors.get(name)
            if name in self.expanding:
                items = value if process is None else [process(v) for v in value]
                merged.update({f"{name}_{i}": v for i, v in enumerate(items, start=1)})
            else:
                merged[name] = value if process is None else process(value)
        if self.order is None:
            return merged
        return tuple(merged[name] for name in self.order)

    def execute(self, conn: Connection, values: Mapping[str, Any]) -> CursorResult[*tuple[Any, ...]]:
        return conn.exec_driver_sql(self.sql, self.bind(values))

    def execute_many(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        conn.exec_driver_sql(self.sql, [self.bind(r) for r in rows])


def compile_driver_statement(
    statement: ClauseElement,
    dialect: Dialect,
    *,
    expanding: Mapping[str, int] | None = None,
    column_keys: Sequence[str] | None = None,
) -> DriverStatement:
    """Compile ``statement`` for ``dialect``, its expanding parameters at the given list lengths."""
    sizes = dict(expanding or {})
    compiled = statement.compile(dialect=dialect, column_keys=list(column_keys) if column_keys else None)
    assert isinstance(compiled, SQLCompiler)
    # Placeholders only fix the lists' lengths; every call binds its own values over them.
    placeholders: dict[str, Any] = {name: [None] * n for name, n in sizes.items()}
    # The call's own parameters are left out of ``fixed``: one it forgets fails, not binds NULL.
    required = {b.key for b in compiled.binds.values() if b.required and b.key not in sizes}
    placeholders.update(dict.fromkeys(required))
    state = compiled.construct_expanded_state(compiled.construct_params(placeholders))
    # Bind processors (SQLite's Boolean, DateTime) run in bind(), as execute would have run them.
    processors = {}
    for b in compiled.binds.values():
        process = b.type.dialect_impl(dialect).bind_processor(dialect)
        if process is not None:
            processors[b.key] = process
    bound = required | {f"{name}_{i}" for name, n in sizes.items() for i in range(1, n + 1)}
    fixed = {name: value for name, value in state.parameters.items() if name not in bound}
    order = tuple(state.positiontup) if state.positiontup is not None else None
    return DriverStatement(
        state.statement, fixed, order, tuple(sizes), frozenset(required | sizes.keys()), processors
    )


def driver_statement(statement: ClauseElement, dialect: Dialect, **expanding: int) -> DriverStatement:
    """``statement`` (a module constant: cached by identity) compiled once per dialect and list lengths."""
    return _cached(statement, dialect, tuple(sorted(expanding.items())))


@functools.lru_cache(maxsize=512)
def _cached(
    statement: ClauseElement, dialect: Dialect, expanding: tuple[tuple[str, int], ...]
) -> DriverStatement:
    return compile_driver_statement(statement, dialect, expanding=dict(expanding))


# Python-side defaults of runs (``default=``): ``insert`` fills them in; driver SQL must too.
RUN_DEFAULTS: Mapping[str, Any] = {
    c.name: c.default.arg  # type: ignore[attr-defined]
    for c in runs.c
    if c.default is not None and c.default.is_scalar
}


@functools.lru_cache(maxsize=64)
def _insert_run(columns: tuple[str, ...], dialect: Dialect) -> DriverStatement:
    unknown = [c for c in columns if c not in runs.c]
    if unknown:
        raise ValueError(f"not columns of runs: {unknown}")
    return compile_driver_statement(insert(runs), dialect, column_keys=columns)


def insert_run(conn: Connection, row: Mapping[str, Any]) -> None:
    """``INSERT INTO runs`` of ``row``, the Python-side defaults it leaves out filled in.

    Raises:
        ValueError: a key of ``row`` is not a column of runs.
    """
    values = {**RUN_DEFAULTS, **row}
    _insert_run(tuple(sorted(values)), conn.dialect).execute(conn, values)


@functools.lru_cache(maxsize=8)
def _insert_events(dialect: Dialect) -> DriverStatement:
    return compile_driver_statement(insert(events), dialect, column_keys=[c.name for c in events.c])


def insert_events(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    """``INSERT INTO run_events`` of complete rows (one executemany, as ``insert`` sent it)."""
    if rows:
        _insert_events(conn.dialect).execute_many(conn, rows)


@dataclass(frozen=True, slots=True)
class _Row:
    """What :meth:`RecordCipher.run` reads of a row: its mapping."""

    _mapping: Mapping[str, Any]


def run_row(row: Any) -> _Row:
    """A driver row of ``SELECT runs.*`` typed as SQLAlchemy's: ``needs_attention`` a bool."""
    mapping = dict(row._mapping)
    mapping["needs_attention"] = bool(mapping["needs_attention"])
    return _Row(mapping)
