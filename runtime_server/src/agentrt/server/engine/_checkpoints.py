"""Checkpoints in the engine (R5.1, R5.6): when to write one, and resuming from the latest.

:func:`due_checkpoint` is asked by each commit: when the commit carries the log past a multiple
of ``[checkpoints] every_events``, the folded state is serialised and a ``run.checkpointed``
event joins the commit; the row is written once the commit succeeded. :func:`resume_state`
is asked when a worker takes a run: the latest checkpoint plus the log's tail, or the whole log
when there is no checkpoint or it cannot stand for the log's prefix (corrupted, too new, of
another agent snapshot). A checkpoint is a cache: nothing depends on it being there.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from agentrt.server.core import (
    STATE_VERSION,
    CheckpointUnusable,
    IllegalTransition,
    RunCheckpointed,
    RunState,
    checkpoint_text,
    restore_checkpoint,
)
from agentrt.server.engine._agents import RUNTIME_VERSION
from agentrt.server.engine._ports import Ports
from agentrt.server.store import RunRecord, StoredCheckpoint, StoredEvent, UnreadableRecord, decode_event

__all__ = ["due_checkpoint", "fold", "resume_state", "write_checkpoint"]

log = logging.getLogger("agentrt.engine")


def due_checkpoint(
    state: RunState, *, buffered: int, every_events: int, agent_config_hash: str, now_ms: int
) -> tuple[StoredCheckpoint, RunCheckpointed] | None:
    """The checkpoint (and its event) a commit of the ``buffered`` last events should carry, if any.

    Due when the commit passes a multiple of ``every_events``; never for an ended run.
    """
    if not every_events or not buffered or state.ended:
        return None
    if state.seq // every_events == (state.seq - buffered) // every_events:
        return None
    text = checkpoint_text(state, runtime_version=RUNTIME_VERSION, agent_config_hash=agent_config_hash)
    row = StoredCheckpoint(state.run_id, state.seq, STATE_VERSION, text, now_ms)
    return row, RunCheckpointed(through_seq=state.seq)


async def write_checkpoint(ports: Ports, checkpoint: StoredCheckpoint) -> None:
    """Store a checkpoint whose run.checkpointed is committed; a failure costs only a longer resume."""
    try:
        await ports.log.write_checkpoint(checkpoint)
    except Exception as exc:  # a cache: the run goes on without it
        log.warning(
            "run %s: checkpoint through seq %s not written: %s",
            checkpoint.run_id,
            checkpoint.through_seq,
            exc,
        )


def fold(state: RunState, events: list[StoredEvent]) -> RunState:
    """``state`` with ``events`` applied, in order."""
    for stored in events:
        state.apply(decode_event(stored.type, stored.payload))
        state.seq += 1
    return state


async def resume_state(
    ports: Ports, record: RunRecord, read_tail: Callable[[int], Awaitable[list[StoredEvent]]]
) -> RunState | None:
    """The run's state from its latest checkpoint and the log after it; None when there is none
    usable (the caller then replays the whole log)."""
    run_id = record.run_id
    try:
        found = await ports.log.read_checkpoint(run_id)
    except UnreadableRecord as exc:
        log.warning("run %s: checkpoint unreadable, replaying the log: %s", run_id, exc)
        return None
    if found is None:
        return None
    try:
        if found.through_seq > record.last_seq:
            raise CheckpointUnusable(f"checkpoint through seq {found.through_seq} is past the log's end")
        state = restore_checkpoint(
            found.state,
            state_version=found.state_version,
            run_id=run_id,
            through_seq=found.through_seq,
            agent_config_hash=record.agent_config_hash,
        )
        tail = await read_tail(found.through_seq)
        if [e.seq for e in tail] != list(range(found.through_seq + 1, record.last_seq + 1)):
            raise CheckpointUnusable("the log's tail does not follow the checkpoint")
        return fold(state, tail)
    except (CheckpointUnusable, IllegalTransition, ValueError) as exc:
        log.warning(
            "run %s: checkpoint through seq %s not used, replaying the log: %s",
            run_id,
            found.through_seq,
            exc,
        )
        return None
