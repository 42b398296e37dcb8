"""Fair turns after commits: the round-robin queue and batch size (core/_fair.py), and the engine's
gate that carries them out (engine/_turns.py), in a real event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from agentrt.server.core import BatchLimits, FairQueue, next_batch
from agentrt.server.engine._turns import FairRunLog, StepTurns

LIMITS = BatchLimits(target_s=0.010, least=2, most=64)


def test_keys_take_turns_oldest_first_within_a_key() -> None:
    queue: FairQueue[str, str] = FairQueue()
    for i in range(4):
        queue.push("a", f"a{i}")
    queue.push("b", "b0")
    queue.push("c", "c0")
    queue.push("b", "b1")
    assert len(queue) == 7 and queue.keys() == 3
    assert [queue.pop() for _ in range(7)] == ["a0", "b0", "c0", "a1", "b1", "a2", "a3"]
    assert len(queue) == 0 and queue.keys() == 0
    with pytest.raises(IndexError):
        queue.pop()


def test_a_key_that_went_quiet_joins_the_end_of_the_rotation() -> None:
    queue: FairQueue[str, str] = FairQueue()
    queue.push("a", "a0")
    queue.push("b", "b0")
    queue.push("b", "b1")
    assert queue.pop() == "a0"  # "a" has nothing left: forgotten
    queue.push("c", "c0")
    queue.push("a", "a1")  # back after "b" and "c"
    assert [queue.pop() for _ in range(4)] == ["b0", "c0", "a1", "b1"]


def test_a_removed_item_is_gone_and_its_empty_key_forgotten() -> None:
    queue: FairQueue[str, str] = FairQueue()
    queue.push("a", "a0")
    queue.push("b", "b0")
    assert queue.remove("a", "a0")
    assert not queue.remove("a", "a0") and not queue.remove("z", "x")
    assert len(queue) == 1 and queue.keys() == 1
    assert queue.pop() == "b0"


def test_the_batch_shrinks_in_proportion_to_a_long_turn_and_grows_by_a_quarter() -> None:
    assert next_batch(40, 0.020, LIMITS) == 20
    assert next_batch(40, 0.400, LIMITS) == LIMITS.least
    assert next_batch(40, 0.005, LIMITS) == 50
    assert next_batch(2, 0.001, LIMITS) == 3
    assert next_batch(60, 0.001, LIMITS) == LIMITS.most
    assert next_batch(40, 0.010, LIMITS) == 50  # at the target: room to grow


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_a_turn_on_an_idle_loop_is_taken_without_waiting() -> None:
    turns = StepTurns(limits=LIMITS, clock=Clock())
    ran: list[str] = []
    asyncio.get_running_loop().call_soon(ran.append, "other")
    await turns.take("a")
    assert ran == [], "take() let the loop turn although nobody was waiting"
    assert turns.waiting() == 0


async def test_waiters_go_a_batch_per_turn_with_tenants_in_turn() -> None:
    # Every loop turn "takes" 500 ms, far past the target: the batch falls to its least, two.
    clock = Clock()
    turns = StepTurns(limits=LIMITS, clock=clock)
    order: list[str] = []
    loop = asyncio.get_running_loop()
    loop_turns = 0
    done = False

    def tick() -> None:
        nonlocal loop_turns
        clock.now += 0.5
        loop_turns += 1
        if not done:
            loop.call_soon(tick)

    async def step(tenant: str, name: str) -> None:
        await turns.take(tenant)
        order.append(name)

    loop.call_soon(tick)
    noisy = [asyncio.create_task(step("a", f"a{i}")) for i in range(10)]
    quiet = asyncio.create_task(step("b", "b0"))
    for _ in range(LIMITS.most):  # this turn's room is used up before any of them asks
        await turns.take("a")
    await asyncio.gather(*noisy, quiet)
    done = True

    # Tenant b's one run went in the first batch, not after tenant a's ten; then two a turn.
    assert order[:2] == ["a0", "b0"]
    assert order[2:] == [f"a{i}" for i in range(1, 10)]
    assert loop_turns >= 6
    assert turns.waiting() == 0


async def test_a_waiter_cancelled_in_the_queue_is_taken_out_of_it() -> None:
    turns = StepTurns(limits=BatchLimits(target_s=0.010, least=1, most=1), clock=Clock())
    first = asyncio.create_task(turns.take("a"))
    second = asyncio.create_task(turns.take("b"))
    await turns.take("z")  # the turn's only place: both tasks will wait
    await asyncio.sleep(0)  # they queue; the next turn lets "a" go
    assert turns.waiting() == 1
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    assert turns.waiting() == 0
    await asyncio.wait_for(first, timeout=5)
    third = asyncio.create_task(turns.take("c"))
    await asyncio.wait_for(third, timeout=5)
    assert turns.waiting() == 0


class Log:
    """A run log that records what was committed (only append is used here)."""

    def __init__(self) -> None:
        self.committed: list[str] = []

    async def append(self, run_id: str, **kwargs: Any) -> int:
        self.committed.append(run_id)
        return int(kwargs["expected_revision"]) + 1


async def test_the_commit_happens_before_the_run_waits_for_its_turn() -> None:
    log = Log()
    turns = StepTurns(limits=BatchLimits(target_s=0.010, least=1, most=1), clock=Clock())
    fair = FairRunLog(log, turns=turns, tenant_of={"r1": "a"}.__getitem__)  # type: ignore[arg-type]
    values: Mapping[str, Any] = {}
    events: Sequence[tuple[str, str]] = ()
    pending = asyncio.create_task(
        fair.append(
            "r1", expected_revision=4, owner="w", first_seq=2, new_events=events, values=values, now_ms=1
        )
    )
    await turns.take("z")  # this turn's only place: the append will wait for the next
    await asyncio.sleep(0)
    assert log.committed == ["r1"] and not pending.done()
    assert await asyncio.wait_for(pending, timeout=5) == 5
