"""Ledger retention (R8.4, R5.4): the tool host forgets settled entries past the keep time, never
RUNNING ones, and refuses a keep time shorter than the documented bound."""

from __future__ import annotations

import asyncio
import math
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from agentrt.server import Settings
from agentrt.server.api._server import _ledger_keep_s
from agentrt.server.engine import ledger_keep_bound_s
from agentrt.server.tools import SpawnedToolHost
from agentrt.toolhost import LedgerRetention, ToolHost
from agentrt.toolhost._cli import main as toolhost_main
from agentrt.toolhost._errors import ErrorCode
from agentrt.toolhost._host import LEDGER_FILE
from agentrt.toolhost._ledger import Ledger, OperationStatus, Replay, Start
from agentrt.toolhost._ledger_retention import MIN_KEEP_S, LedgerPruneCounts, prune_ledger
from agentrt.toolhost._outcome import Outcome


def begin(ledger: Ledger, key: str, *, run_id: str, token: int | None = None) -> Any:
    return ledger.begin(
        idempotency_key=key,
        tool="refund.issue",
        input_hash="h",
        run_id=run_id,
        call_id="c",
        rerun_after_crash=False,
        fencing_token=token,
        tenant="acme",
    )


def keys(path: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(path) as db:
        return sorted(db.execute("SELECT idempotency_key, status FROM operations").fetchall())


def fences(path: Path) -> list[str]:
    with sqlite3.connect(path) as db:
        return sorted(r[0] for r in db.execute("SELECT run_id FROM fencing"))


def test_settled_entries_past_the_cutoff_go_running_ones_and_younger_ones_stay(tmp_path: Path) -> None:
    path = tmp_path / LEDGER_FILE
    with Ledger(path, owner="life-1") as ledger:
        assert isinstance(begin(ledger, "old-ok", run_id="r1", token=1), Start)
        ledger.finish("old-ok", Outcome.success('{"ok": 1}'), tenant="acme")
        begin(ledger, "old-failed", run_id="r1", token=1)
        ledger.finish("old-failed", Outcome.error(ErrorCode.PERMANENT, "no"), tenant="acme")
        begin(ledger, "old-running", run_id="r1", token=1)  # the host "dies" with it RUNNING
        assert ledger.check_fence("r-idle", 3, tenant="acme") is None  # a fence with no entries
        cutoff = time.time_ns()
        while time.time_ns() == cutoff:  # young entries must be strictly later than the cutoff
            pass
        begin(ledger, "young-ok", run_id="r2", token=1)
        ledger.finish("young-ok", Outcome.success("{}"), tenant="acme")

    assert prune_ledger(path, cutoff_ns=cutoff, batch_size=1) == LedgerPruneCounts(operations=2, fences=1)

    assert keys(path) == [("old-running", "RUNNING"), ("young-ok", "SUCCEEDED")]
    assert fences(path) == ["r1", "r2"]  # r1 still has an entry; r2 is young
    with Ledger(path, owner="life-2") as ledger:
        assert isinstance(begin(ledger, "young-ok", run_id="r2", token=1), Replay)
        running = ledger.get("old-running", tenant="acme")
        assert running is not None and running.status is OperationStatus.RUNNING
    # A second pass finds nothing.
    assert prune_ledger(path, cutoff_ns=cutoff) == LedgerPruneCounts()


@pytest.mark.parametrize("keep_s", [0.0, 60.0, MIN_KEEP_S - 1, math.nan, -math.inf])
def test_a_keep_time_below_the_bound_is_refused(keep_s: float) -> None:
    with pytest.raises(ValueError, match="at least 259200 s"):
        LedgerRetention(keep_s=keep_s)


def test_interval_must_be_positive_and_inf_keeps_everything() -> None:
    for interval in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="interval"):
            LedgerRetention(interval_s=interval)
    assert LedgerRetention(keep_s=math.inf).cutoff_ns(10**19) is None
    assert LedgerRetention(keep_s=MIN_KEEP_S).cutoff_ns(10**19) == 10**19 - int(MIN_KEEP_S * 1e9)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--ledger-keep-s", "60"], "at least 259200 s"),
        (["--ledger-keep-s", "nan"], "at least 259200 s"),
        (["--ledger-prune-interval-s", "0"], "interval must be a positive"),
    ],
)
def test_the_host_refuses_a_short_keep_time_at_start(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert toolhost_main([*args, "--no-entrypoints", "--data-dir", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / LEDGER_FILE).exists()  # refused before anything was written


async def test_the_host_prunes_its_own_ledger_in_the_background(tmp_path: Path) -> None:
    path = tmp_path / LEDGER_FILE
    with Ledger(path, owner="life-1") as ledger:
        begin(ledger, "settled", run_id="r1")
        ledger.finish("settled", Outcome.success("{}"), tenant="acme")
        begin(ledger, "running", run_id="r1")
    # The host's clock says the keep time has passed.
    later = LedgerRetention(
        keep_s=MIN_KEEP_S, interval_s=0.05, clock_ns=lambda: time.time_ns() + int((MIN_KEEP_S + 60) * 1e9)
    )
    async with ToolHost(tools={}, data_dir=tmp_path, ledger_retention=later) as host:
        await host.start("127.0.0.1:0")
        deadline = time.monotonic() + 10
        while await asyncio.to_thread(keys, path) != [("running", "RUNNING")]:
            assert time.monotonic() < deadline, "the host never pruned its ledger"
            await asyncio.sleep(0.05)


async def test_a_host_with_the_default_keep_time_prunes_nothing_recent(tmp_path: Path) -> None:
    path = tmp_path / LEDGER_FILE
    with Ledger(path, owner="life-1") as ledger:
        begin(ledger, "settled", run_id="r1")
        ledger.finish("settled", Outcome.success("{}"), tenant="acme")
    passes = 0

    def clock() -> int:
        nonlocal passes
        passes += 1
        return time.time_ns()

    async with ToolHost(
        tools={}, data_dir=tmp_path, ledger_retention=LedgerRetention(interval_s=0.05, clock_ns=clock)
    ) as host:
        await host.start("127.0.0.1:0")
        deadline = time.monotonic() + 10
        while passes < 3:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
    assert await asyncio.to_thread(keys, path) == [("settled", "SUCCEEDED")]


def test_the_runtime_bound_with_defaults_is_the_hosts_minimum_and_grows_with_its_limits() -> None:
    assert ledger_keep_bound_s(Settings()) == MIN_KEEP_S
    assert _ledger_keep_s(Settings()) is None  # the host's default (30 days) covers it
    long_runs = Settings.model_validate(
        {"limits": {"max_timeout_s": 40 * 86_400}, "agents": {"a": {"approvals": {"timeout_s": 7 * 86_400}}}}
    )
    assert ledger_keep_bound_s(long_runs) == (40 + 7 + 1) * 86_400
    assert _ledger_keep_s(long_runs) == (40 + 7 + 1) * 86_400


async def test_a_spawned_host_gets_the_runtimes_keep_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The host enforces its minimum, so a keep time below it proves the flag reaches the child.
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # where the child's private directory goes
    with pytest.raises(RuntimeError, match="did not start"):
        await SpawnedToolHost.start(data_dir=str(tmp_path / "short"), entrypoints=False, ledger_keep_s=60.0)
    assert list(temp.iterdir()) == []  # a child that never served leaves no secrets behind
    host = await SpawnedToolHost.start(
        data_dir=str(tmp_path / "long"), entrypoints=False, ledger_keep_s=48 * 86_400.0
    )
    assert list(temp.iterdir()) == [host.secrets_dir]
    await host.stop()
    assert list(temp.iterdir()) == []
