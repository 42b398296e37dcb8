"""Fair turns between tenants: who goes next, and how many may go in one turn of the event loop.

A runtime process drives every run on one event loop, which runs whatever is ready in arrival
order. When one tenant keeps hundreds of runs stepping, each turn of the loop carries a step of
each of them, and every await of another tenant's request waits for that whole turn. The engine
therefore lets runs go on after a commit in bounded batches, taken round-robin across tenants
(:class:`FairQueue`); the size of a batch follows how long the last turn of the loop took
(:func:`next_batch`), so a loop with time to spare is never held back.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["BatchLimits", "FairQueue", "next_batch"]

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class FairQueue(Generic[K, T]):
    """Items queued per key, taken one key at a time in turn, oldest first within a key.

    A key that has nothing queued is forgotten, so the queue holds only what waits. A key that
    gets an item after being forgotten joins the end of the rotation: a tenant cannot jump ahead
    by going quiet for a moment.
    """

    def __init__(self) -> None:
        self._queues: OrderedDict[K, deque[T]] = OrderedDict()
        self._size = 0

    def push(self, key: K, item: T) -> None:
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
        queue.append(item)
        self._size += 1

    def pop(self) -> T:
        """The oldest item of the key whose turn it is; that key then goes to the end.

        Raises:
            IndexError: nothing is queued.
        """
        if not self._queues:
            raise IndexError("pop from an empty FairQueue")
        key, queue = next(iter(self._queues.items()))
        item = queue.popleft()
        self._size -= 1
        if queue:
            self._queues.move_to_end(key)
        else:
            del self._queues[key]
        return item

    def remove(self, key: K, item: T) -> bool:
        """Take ``item`` out of ``key``'s queue (a waiter that gave up); False if it is not there."""
        queue = self._queues.get(key)
        if queue is None:
            return False
        try:
            queue.remove(item)
        except ValueError:
            return False
        self._size -= 1
        if not queue:
            del self._queues[key]
        return True

    def keys(self) -> int:
        """How many keys have something queued."""
        return len(self._queues)

    def __len__(self) -> int:
        return self._size


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchLimits:
    """How many waiters one turn of the loop may let go.

    Attributes:
        target_s: The loop turn to aim for: another tenant's request waits about this long per
            await while the loop is saturated.
        least: Never fewer (progress under any load).
        most: Never more (the first turn after a quiet spell).
    """

    target_s: float = 0.010
    least: int = 4
    most: int = 512


def next_batch(batch: int, turn_s: float, limits: BatchLimits) -> int:
    """The batch for the next turn, given the last batch and how long the last turn took.

    A turn longer than the target shrinks the batch in proportion (the work of a turn grows with
    the runs let go in it); a shorter one grows it by a quarter, so a loop with time to spare soon
    lets everyone go at once.
    """
    too_long = turn_s > limits.target_s
    wanted = int(batch * limits.target_s / turn_s) if too_long else batch + max(1, batch // 4)
    return max(limits.least, min(limits.most, wanted))
