"""The released nudge, without Redis: its wire form and the inbox that takes it.

A draining replica names the runs whose leases it gave back on ``{prefix}released``; every other
replica's :class:`ReleasedInbox` hands them to the engine to claim at once.
"""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from agentrt.server.engine import ReleasedInbox
from agentrt.server.events._wire import (
    MAX_RELEASED_IDS,
    ReleasedMessage,
    decode_released,
    encode_released,
    released_channel,
)


def test_released_round_trips_each_run_once_in_bounded_messages() -> None:
    assert released_channel("agentrt:") == "agentrt:released"
    (one,) = encode_released("replica-a", ["r1", "r2", "r1"])
    assert json.loads(one) == {"o": "replica-a", "x": ["r1", "r2"]}
    assert decode_released(one) == ReleasedMessage("replica-a", ("r1", "r2"))

    many = [f"run-{i}" for i in range(MAX_RELEASED_IDS * 2 + 1)]
    messages = encode_released("replica-a", many)
    assert len(messages) == 3
    decoded = [decode_released(m) for m in messages]
    assert [run_id for m in decoded if m is not None for run_id in m.run_ids] == many
    assert encode_released("replica-a", []) == []  # nothing released, nothing sent


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff\xfe",
        b"not json",
        b"[]",
        b'"x"',
        b'{"o": "a"}',
        b'{"x": ["r1"]}',
        b'{"o": "", "x": ["r1"]}',
        b'{"o": 7, "x": ["r1"]}',
        b'{"o": "a", "x": "r1"}',
        b'{"o": "a", "x": []}',
        b'{"o": "a", "x": ["r1", 2]}',
        b'{"o": "a", "x": [""]}',
        json.dumps({"o": "a", "x": ["r" * 257]}).encode(),
        json.dumps({"o": "a", "x": [f"r{i}" for i in range(MAX_RELEASED_IDS + 1)]}).encode(),
        b'{"o": "a", "w": "r1"}',  # a wake is not a release
    ],
)
def test_what_is_not_a_released_message_decodes_to_none(data: bytes) -> None:
    assert decode_released(data) is None


class Claims:
    """The engine's side of the inbox: records each batch it is handed."""

    def __init__(self, *, fail_first: bool = False) -> None:
        self.batches: list[list[str]] = []
        self.fail_first = fail_first
        self.arrived = asyncio.Event()

    async def __call__(self, run_ids: list[str]) -> None:
        self.batches.append(run_ids)
        self.arrived.set()
        if self.fail_first and len(self.batches) == 1:
            raise RuntimeError("the store is away")


async def next_batch(claims: Claims, count: int) -> None:
    async with asyncio.timeout(5):
        while len(claims.batches) < count:
            claims.arrived.clear()
            await claims.arrived.wait()


async def test_the_inbox_hands_over_other_replicas_runs_once_each_in_one_batch() -> None:
    inbox = ReleasedInbox(origin="me")
    inbox.received(encode_released("other", ["r1", "r2"])[0])
    inbox.received(encode_released("other", ["r2", "r3"])[0])  # r2 again: claimed once
    inbox.received(encode_released("me", ["r4"])[0])  # its own: not for it
    claims = Claims()
    task = asyncio.create_task(inbox.run_forever(claims))
    try:
        await next_batch(claims, 1)
        assert claims.batches == [["r1", "r2", "r3"]]
        inbox.received(encode_released("third", ["r5"])[0])
        await next_batch(claims, 2)
        assert claims.batches[1] == ["r5"]
    finally:
        task.cancel()
    assert inbox.malformed == 0 and inbox.dropped == 0


async def test_a_malformed_message_is_dropped_counted_and_logged_once_not_fatal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    inbox = ReleasedInbox(origin="me")
    with caplog.at_level(logging.DEBUG, logger="agentrt.engine"):
        inbox.received(b"not json")
        inbox.received(b'{"o": "other", "x": [3]}')
    assert inbox.malformed == 2
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "released channel" in warned[0].getMessage()  # not once per message
    assert len([r for r in caplog.records if "released channel" in r.getMessage()]) == 2
    # The inbox still works, and had nothing to hand over from what did not decode.
    claims = Claims()
    inbox.received(encode_released("other", ["r1"])[0])
    task = asyncio.create_task(inbox.run_forever(claims))
    try:
        await next_batch(claims, 1)
    finally:
        task.cancel()
    assert claims.batches == [["r1"]]


async def test_a_failed_claim_is_logged_and_the_inbox_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    inbox = ReleasedInbox(origin="me")
    claims = Claims(fail_first=True)
    task = asyncio.create_task(inbox.run_forever(claims))
    try:
        inbox.received(encode_released("other", ["r1"])[0])
        await next_batch(claims, 1)
        inbox.received(encode_released("other", ["r2"])[0])
        await next_batch(claims, 2)
    finally:
        task.cancel()
    assert claims.batches == [["r1"], ["r2"]]
    assert "claiming released runs failed" in caplog.text


async def test_a_full_inbox_drops_and_counts_and_batches_are_bounded() -> None:
    inbox = ReleasedInbox(origin="me", max_pending=MAX_RELEASED_IDS + 2)
    ids = [f"r{i}" for i in range(MAX_RELEASED_IDS + 5)]
    for message in encode_released("other", ids):
        inbox.received(message)
    assert inbox.dropped == 3  # the poll loop still finds those
    claims = Claims()
    task = asyncio.create_task(inbox.run_forever(claims))
    try:
        await next_batch(claims, 2)
    finally:
        task.cancel()
    assert claims.batches == [ids[:MAX_RELEASED_IDS], ids[MAX_RELEASED_IDS : MAX_RELEASED_IDS + 2]]
