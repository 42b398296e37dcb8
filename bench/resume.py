"""Resume benchmark: what it costs a worker to take over a run, with checkpoints on and off (R5.1).

For runs whose logs hold about 50 and 5,000 events, it builds the log with the real step loop
(in-process fakes of the model and a read-only tool, ``agentrt.testing.engine``), stops the run
just before its end as a crash would, stores the row, the log and the latest checkpoint in a
SQLite database (WAL, synchronous=FULL), and times ``open_run``: read the row, then the whole log
(checkpoints off) or the latest checkpoint and the log's tail (on, every 200 events), decode and
fold. Prints the median and p90 of repeated resumes; asserts nothing.

Run: ``python bench/resume.py`` (``--repeat 20``, ``--every 200``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentrt.server.config import (  # noqa: E402
    AgentConfig,
    CheckpointsConfig,
    Settings,
)
from agentrt.server.engine._driver import open_run  # noqa: E402
from agentrt.server.engine._run import RunHandle  # noqa: E402
from agentrt.server.store import Store  # noqa: E402
from agentrt.server.tools import CallMetadata, ToolOutcome  # noqa: E402
from agentrt.testing.engine import Crashed, EngineWorld  # noqa: E402

EVENTS_PER_STEP = 4  # step.started, model.completed, tool.started, tool.completed


async def lookup(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
    order = json.loads(arguments_json)["id"]
    return ToolOutcome(json.dumps({"order": order, "status": "shipped", "carrier": "UPS"}), None)


async def build_log(events: int, every: int) -> EngineWorld:
    """A run of about ``events`` events, stopped by a crash right before its last step."""
    steps = max(2, events // EVENTS_PER_STEP)
    agent = AgentConfig(tools=["orders.lookup"])
    agent = agent.model_copy(
        update={
            "budgets": agent.budgets.model_copy(
                update={"max_model_steps": steps + 1, "max_tool_calls": steps}
            ),
            "loops": agent.loops.model_copy(
                update={"max_identical_calls": 0, "max_steps_without_new_fact": 0}
            ),
        }
    )
    settings = Settings(checkpoints=CheckpointsConfig(every_events=every))
    world = EngineWorld(agent=agent, settings=settings)
    world.models.by_step = True
    for step in range(1, steps + 1):
        world.models.answer(tool_calls=[(f"c{step}", "orders.lookup", json.dumps({"id": step}))])
    world.models.answer(text="done")
    world.tools.add("orders.lookup", lookup, side_effect="read")
    world.log.crash_after = 2 * steps  # two commits a step: stop before the final answer
    run_id = world.create_run("look up every order")
    with contextlib.suppress(Crashed):
        await world.drive(run_id)
    return world


async def store_world(world: EngineWorld, store: Store) -> str:
    """Copy the run's row, log and latest checkpoint into ``store``."""
    ((run_id, record),) = world.log.runs.items()
    fields = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    for derived in ("revision", "last_seq", "created_ms", "updated_ms"):
        fields.pop(derived)
    log = [(e.type, e.payload) for e in world.log.events[run_id]]
    await store.create_run(fields, log, record.created_ms)
    checkpoint = world.log.checkpoints.get(run_id)
    if checkpoint is not None:
        await store.write_checkpoint(checkpoint)
    return run_id


async def time_resumes(world: EngineWorld, store: Store, run_id: str, repeat: int) -> list[float]:
    owner = world.log.runs[run_id].lease_owner or ""
    ports = dataclasses.replace(world.ports(), log=store, owner=owner)
    seconds = []
    for _ in range(repeat):
        handle = RunHandle(run_id, 1, lease_deadline_s=world.clock() + 3600)
        began = time.perf_counter()
        ctx = await open_run(ports, handle, None)
        seconds.append(time.perf_counter() - began)
        assert ctx is not None and ctx.state.seq == world.log.runs[run_id].last_seq
    return seconds


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--every", type=int, default=200, help="checkpoint every N events when on")
    args = parser.parse_args()
    print(f"{'events':>7} {'checkpoints':>12} {'tail':>6} {'median ms':>10} {'p90 ms':>8}")
    for events in (50, 5000):
        for every in (0, args.every):
            world = await build_log(events, every)
            with tempfile.TemporaryDirectory() as tmp:
                store = await Store.open(f"sqlite:///{tmp}/bench.sqlite")
                try:
                    run_id = await store_world(world, store)
                    seconds = sorted(await time_resumes(world, store, run_id, args.repeat))
                finally:
                    await store.close()
            last_seq = world.log.runs[run_id].last_seq
            checkpoint = world.log.checkpoints.get(run_id)
            tail = last_seq - checkpoint.through_seq if checkpoint is not None else last_seq
            label = f"every {every}" if every else "off"
            median_ms = statistics.median(seconds) * 1000
            p90_ms = seconds[int(0.9 * (len(seconds) - 1))] * 1000
            print(f"{last_seq:>7} {label:>12} {tail:>6} {median_ms:>10.2f} {p90_ms:>8.2f}")


if __name__ == "__main__":
    asyncio.run(main())
