"""Checkpoints of runs' folded state (R5.1): a cache of the log, one row per run kept.

A checkpoint is written after the commit that logged its ``run.checkpointed`` event, outside
that transaction: it describes events that are committed and never change, so a late writer (an
owner that lost its lease since) still writes a true one, and a crash before it is written only
costs the next resume a longer replay. Only the latest checkpoint of a run is kept.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, delete, insert, select
from sqlalchemy.exc import IntegrityError

from agentrt.server.store._crypt import RecordCipher
from agentrt.server.store._db import Database
from agentrt.server.store._schema import checkpoints

__all__ = ["Checkpoints", "StoredCheckpoint"]


@dataclass(frozen=True, slots=True)
class StoredCheckpoint:
    """A ``run_checkpoints`` row; ``state`` is the checkpoint's text (``core.checkpoint_text``)."""

    run_id: str
    through_seq: int
    state_version: int
    state: str
    created_ms: int


class Checkpoints:
    """Reads and writes the ``run_checkpoints`` table, sealed like events when a cipher is set."""

    def __init__(self, db: Database, crypt: RecordCipher) -> None:
        self.db = db
        self.crypt = crypt

    async def write(self, checkpoint: StoredCheckpoint) -> None:
        """Store ``checkpoint`` and drop the run's older ones; one already at its seq is left as it is."""
        row = {
            "run_id": checkpoint.run_id,
            "through_seq": checkpoint.through_seq,
            "state_version": checkpoint.state_version,
            "state": self.crypt.seal_checkpoint(checkpoint.run_id, checkpoint.through_seq, checkpoint.state),
            "created_ms": checkpoint.created_ms,
        }

        def write(conn: Connection) -> None:
            newer = conn.execute(
                select(checkpoints.c.through_seq).where(
                    checkpoints.c.run_id == checkpoint.run_id,
                    checkpoints.c.through_seq >= checkpoint.through_seq,
                )
            ).first()
            if newer is not None:  # a later owner got there first (or the same checkpoint again)
                return
            conn.execute(insert(checkpoints).values(**row))
            conn.execute(
                delete(checkpoints).where(
                    checkpoints.c.run_id == checkpoint.run_id,
                    checkpoints.c.through_seq < checkpoint.through_seq,
                )
            )

        try:
            await self.db.transaction(write)
        except IntegrityError:
            return  # another writer inserted the same checkpoint between the read and the insert

    async def latest(self, run_id: str) -> StoredCheckpoint | None:
        """The run's latest checkpoint, or None.

        Raises:
            UnreadableRecord: it is sealed and cannot be opened.
        """

        def read(conn: Connection) -> StoredCheckpoint | None:
            row = conn.execute(
                select(checkpoints)
                .where(checkpoints.c.run_id == run_id)
                .order_by(checkpoints.c.through_seq.desc())
                .limit(1)
            ).first()
            if row is None:
                return None
            state = self.crypt.checkpoint_state(row.run_id, row.through_seq, row.state)
            return StoredCheckpoint(row.run_id, row.through_seq, row.state_version, state, row.created_ms)

        return await self.db.transaction(read)
