"""Notes, kept in a SQLite file in the tool host's data directory.

``notes.add`` is a write. The host records each call's outcome under the runtime's idempotency
key, so a retry of a call that finished is answered from its ledger. What the ledger cannot know
is whether a call cut off mid-way (the host killed, the deadline hit) took effect: the note's own
store answers that, because every note carries the key of the call that wrote it
(``agentrt_query_operation``).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pydantic

from agentrt.toolhost import SideEffect, Tool, ToolContext, ToolHostConfig, hookimpl, tool

NOTES_FILE = "notes.sqlite"


def _connect(data_dir: Path) -> sqlite3.Connection:
    data_dir.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(data_dir / NOTES_FILE)
    db.execute(
        "CREATE TABLE IF NOT EXISTS notes ("
        " idempotency_key TEXT PRIMARY KEY,"  # one note per call, however often it is sent
        " topic TEXT NOT NULL, text TEXT NOT NULL)"
    )
    return db


class AddArgs(pydantic.BaseModel):
    topic: str = pydantic.Field(min_length=1, max_length=80)
    text: str = pydantic.Field(min_length=1, max_length=2000)


class ListArgs(pydantic.BaseModel):
    topic: str = pydantic.Field(min_length=1, max_length=80)


# --8<-- [start:add]
@tool(
    name="notes.add",
    description="Add a note under a topic.",
    side_effect=SideEffect.WRITE,
    supports_query=True,  # agentrt_query_operation below can tell whether a call took effect
)
def add_note(args: AddArgs, ctx: ToolContext) -> dict[str, Any]:
    with _connect(ctx.data_dir) as db:
        # Keyed by the call: a second effect attempt with the same key writes nothing.
        db.execute(
            "INSERT OR IGNORE INTO notes VALUES (?, ?, ?)", (ctx.idempotency_key, args.topic, args.text)
        )
    return {"topic": args.topic, "added": args.text}


# --8<-- [end:add]


# --8<-- [start:list]
@tool(
    name="notes.list",
    description="List the notes of a topic.",
    side_effect=SideEffect.READ_ONLY,
    idempotent=True,
)
def list_notes(args: ListArgs, ctx: ToolContext) -> dict[str, Any]:
    with _connect(ctx.data_dir) as db:
        rows = db.execute("SELECT text FROM notes WHERE topic = ? ORDER BY rowid", (args.topic,))
        return {"topic": args.topic, "notes": [text for (text,) in rows]}


# --8<-- [end:list]


# --8<-- [start:hooks]
@hookimpl
def agentrt_register_tools(config: ToolHostConfig) -> list[Tool]:
    return [add_note, list_notes]


@hookimpl
def agentrt_query_operation(tool: str, idempotency_key: str, data_dir: Path) -> dict[str, Any] | None:
    """Did the ``notes.add`` call with this key take effect? Asked when the ledger cannot tell."""
    if tool != add_note.name:
        return None
    with _connect(data_dir) as db:
        row = db.execute(
            "SELECT topic, text FROM notes WHERE idempotency_key = ?", (idempotency_key,)
        ).fetchone()
    if row is None:
        return {"status": "absent"}
    return {"status": "succeeded", "result": {"topic": row[0], "added": row[1]}}


# --8<-- [end:hooks]
