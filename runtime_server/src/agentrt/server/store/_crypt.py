"""Payload encryption at rest inside the store (DESIGN R10.2, R5.7).

With a :class:`~agentrt.toolhost.security.PayloadCipher` the store seals what a run carries (event
payloads, input, output, the agent snapshot, metadata, the pending approval, queued signals)
on the way in and opens it on the way out; callers see plaintext records only. Ids, tenant,
phase, revision, seq, times, reason and lease columns stay in clear so queries keep working.

Each value is bound to its place by ``aad`` (table, column, run id, and seq for an event), so a
ciphertext copied into another row does not open. Empty strings are stored as they are: they
carry nothing, and ``session_turns`` selects runs by ``output != ''``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from agentrt.server.core import AgentRtError
from agentrt.server.store._records import RunRecord, Signal, StoredEvent
from agentrt.toolhost.security import CipherError, PayloadCipher

__all__ = ["SEALED_RUN_COLUMNS", "RecordCipher", "UnreadableRecord", "load_cipher"]

log = logging.getLogger("agentrt.store")

SEALED_RUN_COLUMNS = ("agent_spec", "input", "output", "metadata", "pending_approval", "variables")
_SEALED_PREFIX = "enc:v1:"
# Free text may start with anything; every other sealed column holds JSON, which never starts
# with the sealed prefix, so there a prefixed value read without a cipher was surely sealed.
_FREE_TEXT = frozenset({"runs.input", "runs.output"})
# What a listing shows for a run whose sealed columns cannot be opened (see RecordCipher.run).
_UNREADABLE_PLACEHOLDERS: dict[str, Any] = {
    "agent_spec": "{}",
    "input": "",
    "output": "",
    "metadata": "{}",
    "pending_approval": None,
    "variables": None,
}


def load_cipher(key_file: str) -> PayloadCipher | None:
    """The cipher of ``[encryption] key_file``, or None when it is not set.

    Raises:
        ValueError: The file is missing, unreadable or malformed; the message names the file and
            key ids, never key bytes.
    """
    if not key_file:
        return None
    try:
        return PayloadCipher.from_file(key_file)
    except CipherError as exc:
        raise ValueError(f"encryption.key_file {key_file}: {exc}") from None


class UnreadableRecord(AgentRtError):
    """A stored value of one run cannot be opened: its key is not in the key file, it does not
    authenticate, or it is sealed and no key file is configured (INTERNAL, ``RECORD_UNREADABLE``)."""

    reason = "RECORD_UNREADABLE"


class RecordCipher:
    """Seals and opens the store's sensitive columns; without a cipher it passes values through.

    Args:
        cipher: The key file's cipher, or None when encryption at rest is off.
    """

    def __init__(self, *, cipher: PayloadCipher | None) -> None:
        self.cipher = cipher

    # -- sealing ------------------------------------------------------------------------------------

    def seal_run_values(self, run_id: str, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` (columns of ``runs``) with the sensitive ones sealed."""
        sealed = dict(values)
        if self.cipher is None:
            return sealed
        for column in SEALED_RUN_COLUMNS:
            value = sealed.get(column)
            if value:
                sealed[column] = self.cipher.seal(value, aad=f"runs.{column}:{run_id}")
        return sealed

    def seal_event(self, run_id: str, seq: int, payload: str) -> str:
        if self.cipher is None or not payload:
            return payload
        return self.cipher.seal(payload, aad=f"run_events.payload:{run_id}:{seq}")

    def seal_signal(self, run_id: str, kind: str, payload: str) -> str:
        if self.cipher is None or not payload:
            return payload
        return self.cipher.seal(payload, aad=f"run_signals.payload:{run_id}:{kind}")

    def seal_checkpoint(self, run_id: str, through_seq: int, state: str) -> str:
        if self.cipher is None or not state:
            return state
        return self.cipher.seal(state, aad=f"run_checkpoints.state:{run_id}:{through_seq}")

    # -- opening ------------------------------------------------------------------------------------

    def checkpoint_state(self, run_id: str, through_seq: int, state: str) -> str:
        """A ``run_checkpoints`` row's state as plaintext.

        Raises:
            UnreadableRecord: The state cannot be opened.
        """
        if not state:
            return state
        aad = f"run_checkpoints.state:{run_id}:{through_seq}"
        return self._open(state, run_id, "run_checkpoints.state", f" (through seq {through_seq})", aad)

    def run(self, row: Any, *, strict: bool = True) -> RunRecord:
        """The ``runs`` row as a plaintext record.

        Args:
            row: A SQLAlchemy row of ``runs``, or its values by column name.
            strict: Raise when a value cannot be opened. A listing passes False: the run then shows
                with its sealed columns empty (and a warning is logged) so that one unreadable run
                never hides the others.

        Raises:
            UnreadableRecord: ``strict`` and a sealed column of this run cannot be opened.
        """
        values = dict(row) if isinstance(row, Mapping) else dict(row._mapping)
        run_id = values["run_id"]
        try:
            for column in SEALED_RUN_COLUMNS:
                value = values[column]
                if value:
                    values[column] = self._open(
                        value, run_id, f"runs.{column}", "", f"runs.{column}:{run_id}"
                    )
        except UnreadableRecord as exc:
            if strict:
                raise
            log.warning("%s; listing it without its sealed columns", exc.message)
            values.update(_UNREADABLE_PLACEHOLDERS)
        return RunRecord(**values)

    def event(self, row: Any) -> StoredEvent:
        """A ``run_events`` row as a plaintext event.

        Raises:
            UnreadableRecord: The payload cannot be opened.
        """
        payload = row.payload
        if payload:
            aad = f"run_events.payload:{row.run_id}:{row.seq}"
            payload = self._open(payload, row.run_id, "run_events.payload", f" (seq {row.seq})", aad)
        return StoredEvent(row.run_id, row.seq, row.type, payload, row.created_ms)

    def signal(self, row: Any) -> Signal:
        """A ``run_signals`` row as a plaintext signal.

        Raises:
            UnreadableRecord: The payload cannot be opened.
        """
        payload = row.payload
        if payload:
            aad = f"run_signals.payload:{row.run_id}:{row.kind}"
            payload = self._open(payload, row.run_id, "run_signals.payload", f" (signal {row.id})", aad)
        return Signal(row.id, row.run_id, row.kind, payload)

    def _open(self, value: str, run_id: str, column: str, detail: str, aad: str) -> str:
        if self.cipher is None:
            if value.startswith(_SEALED_PREFIX) and column not in _FREE_TEXT:
                raise UnreadableRecord(
                    f"run {run_id}: {column}{detail} is encrypted but no [encryption] key_file is configured",
                    metadata={"run_id": run_id, "column": column},
                )
            return value
        try:
            return self.cipher.open(value, aad=aad)
        except CipherError as exc:
            # The message names the key id and the place, never key bytes or the value.
            raise UnreadableRecord(
                f"run {run_id}: {column}{detail} cannot be read: {exc}",
                metadata={"run_id": run_id, "column": column},
            ) from None
