"""The PostgreSQL ledger a tool host pool shares: one execution per key across hosts, fencing across
hosts, dead owners told from busy ones, sealing, schema setup, retention and errors without secrets."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc.aio
import psycopg
import pydantic
import pytest

from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.proto.toolhost.v1.tool_host_service_pb2 import GetOperationRequest, InvokeToolRequest
from agentrt.proto.toolhost.v1.tool_host_service_pb2_grpc import ToolHostServiceStub
from agentrt.toolhost import LedgerRetention, SideEffect, ToolContext, ToolHost, tool
from agentrt.toolhost._errors import ErrorCode
from agentrt.toolhost._host import LEDGER_FILE
from agentrt.toolhost._intents import IntentCall, Intents, Pending, Proceed
from agentrt.toolhost._ledger_pg import PgLedger
from agentrt.toolhost._ledger_pg_config import PgLedgerOptions, redact_url
from agentrt.toolhost._ledger_pg_schema import PG_SCHEMA_VERSION
from agentrt.toolhost._ledger_retention import MIN_KEEP_S, LedgerPruneCounts
from agentrt.toolhost._ledger_schema import LedgerVersionError
from agentrt.toolhost._ledger_types import (
    Busy,
    Fenced,
    LedgerUnavailable,
    OperationStatus,
    OutcomeUnknown,
    Replay,
    Start,
    sealing_aad,
)
from agentrt.toolhost._outcome import Outcome
from agentrt.toolhost._sdk import IntentScope
from agentrt.toolhost.security import PayloadCipher

pytestmark = pytest.mark.postgres

CIPHER = PayloadCipher(keys={"k1": b"k" * 32}, active="k1")


class WriteArgs(pydantic.BaseModel):
    n: int = 0


@pytest.fixture
def options(pg_database: str) -> PgLedgerOptions:
    return PgLedgerOptions(url=pg_database, schema=f"t_{uuid.uuid4().hex[:12]}", owner_ttl_s=0.5)


@pytest.fixture
def hosts(options: PgLedgerOptions) -> Iterator[Callable[..., PgLedger]]:
    opened: list[PgLedger] = []

    def open_host(owner: str, **kwargs: Any) -> PgLedger:
        ledger = PgLedger(options, owner=owner, **kwargs)
        opened.append(ledger)
        return ledger

    yield open_host
    for ledger in opened:
        ledger.close()


def _begin(ledger: PgLedger, key: str = "k1", **overrides: Any) -> Any:
    kwargs: dict[str, Any] = {
        "tenant": "acme",
        "idempotency_key": key,
        "tool": "refund.issue",
        "input_hash": "h1",
        "run_id": "run-1",
        "call_id": "call-1",
        "rerun_after_crash": False,
    }
    kwargs.update(overrides)
    return ledger.begin(**kwargs)


def _wait_until(condition: Callable[[], bool], *, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_the_same_key_begun_on_many_hosts_at_once_starts_exactly_once(
    hosts: Callable[..., PgLedger],
) -> None:
    ledgers = [hosts(f"host-{i}") for i in range(6)]
    for round_ in range(5):
        barrier = threading.Barrier(len(ledgers))
        decisions: list[Any] = [None] * len(ledgers)

        def race(index: int, key: str, barrier: threading.Barrier, decisions: list[Any]) -> None:
            barrier.wait()
            decisions[index] = _begin(ledgers[index], key, rerun_after_crash=True, fencing_token=1)

        threads = [
            threading.Thread(target=race, args=(i, f"k{round_}", barrier, decisions))
            for i in range(len(ledgers))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        # Even a safe tool is not run twice at once: the others see a live owner (Busy).
        assert sum(isinstance(d, Start) for d in decisions) == 1, decisions
        assert all(isinstance(d, Start | Busy) for d in decisions), decisions


def test_a_live_hosts_running_call_is_busy_elsewhere_and_never_settled_as_an_orphan(
    hosts: Callable[..., PgLedger],
) -> None:
    a, b = hosts("host-a"), hosts("host-b")
    assert isinstance(_begin(a), Start)
    busy = _begin(b)
    assert isinstance(busy, Busy) and busy.record.owner == "host-a"
    record = b.get("k1", tenant="acme")
    assert record is not None and not b.is_orphan(record)
    b.settle_orphan("k1", Outcome.success("stolen"), tenant="acme")  # refused: its owner is alive
    a.finish("k1", Outcome.success('{"ok": 1}'), tenant="acme")
    replay = _begin(b)
    assert isinstance(replay, Replay) and replay.record.outcome == Outcome.success('{"ok": 1}')


def test_a_host_killed_mid_call_is_an_orphan_for_the_others_once_its_heartbeat_expires(
    hosts: Callable[..., PgLedger],
) -> None:
    dying = hosts("host-a", heartbeat=False)  # a killed host: it never beats again, never signs off
    b = hosts("host-b")
    assert isinstance(_begin(dying), Start)
    assert isinstance(_begin(dying, "safe"), Start)
    record = b.get("k1", tenant="acme")
    assert record is not None
    _wait_until(lambda: b.is_orphan(record))
    unknown = _begin(b)
    assert isinstance(unknown, OutcomeUnknown)  # a write is never run again blind
    rerun = _begin(b, "safe", rerun_after_crash=True)
    assert isinstance(rerun, Start) and (rerun.record.owner, rerun.record.executions) == ("host-b", 2)
    b.settle_orphan("k1", Outcome.success('{"from": "query hook"}'), tenant="acme")
    settled = b.get("k1", tenant="acme")
    assert settled is not None and settled.status is OperationStatus.SUCCEEDED
    dying.finish("safe", Outcome.success("late"), tenant="acme")  # the dead owner's stray finish
    assert b.get("safe", tenant="acme").status is OperationStatus.RUNNING  # type: ignore[union-attr]


def test_a_host_that_closes_signs_off_at_once(hosts: Callable[..., PgLedger]) -> None:
    a, b = hosts("host-a"), hosts("host-b")
    _begin(a)
    record = b.get("k1", tenant="acme")
    assert record is not None and not b.is_orphan(record)
    a.close()
    assert b.is_orphan(record)


def test_fencing_tokens_only_grow_across_hosts(hosts: Callable[..., PgLedger]) -> None:
    a, b = hosts("host-a"), hosts("host-b")
    assert isinstance(_begin(a, "k1", fencing_token=3), Start)
    assert b.check_fence("run-1", 2, tenant="acme") == 3
    assert b.check_fence("run-1", 5, tenant="acme") is None
    # a remembered 3 on its own: its one-statement path still sees b's 5 in the table.
    assert _begin(a, "k2", fencing_token=3) == Fenced(5)
    assert a.get("k2", tenant="acme") is None


def test_concurrent_fence_raises_keep_the_highest(hosts: Callable[..., PgLedger]) -> None:
    ledgers = [hosts(f"host-{i}") for i in range(5)]
    barrier = threading.Barrier(len(ledgers))

    def raise_to(index: int) -> None:
        barrier.wait()
        for token in range(index, 40, len(ledgers)):
            ledgers[index].check_fence("run-9", token, tenant="acme")

    threads = [threading.Thread(target=raise_to, args=(i,)) for i in range(len(ledgers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert ledgers[0].check_fence("run-9", 38, tenant="acme") == 39


def test_outcomes_are_sealed_at_rest_as_in_sqlite(
    hosts: Callable[..., PgLedger], options: PgLedgerOptions
) -> None:
    a = hosts("host-a", cipher=CIPHER)
    _begin(a, "ok")
    a.finish("ok", Outcome.success('{"customer": "Ada"}'), tenant="acme")
    with psycopg.connect(options.url) as db:
        row = db.execute(
            f'SELECT result_json FROM "{options.schema}".operations WHERE idempotency_key = %s', ("ok",)
        ).fetchone()
    assert row is not None and row[0].startswith("enc:v1:k1:") and "Ada" not in row[0]
    assert CIPHER.open(row[0], aad=sealing_aad("acme", "ok", "result_json")) == '{"customer": "Ada"}'
    b = hosts("host-b", cipher=CIPHER)  # another host of the pool, with the same keys, reads it
    assert b.get("ok", tenant="acme").outcome == Outcome.success('{"customer": "Ada"}')  # type: ignore[union-attr]


def test_hosts_starting_together_create_the_schema_once(options: PgLedgerOptions) -> None:
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []
    opened: list[PgLedger] = []

    def start(index: int) -> None:
        barrier.wait()
        try:
            opened.append(PgLedger(options, owner=f"host-{index}", heartbeat=False))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for ledger in opened:
        ledger.close()
    assert errors == [] and len(opened) == 4
    with psycopg.connect(options.url) as db:
        versions = db.execute(f'SELECT version FROM "{options.schema}".ledger_schema_version').fetchall()
    assert versions == [(PG_SCHEMA_VERSION,)]


def test_a_schema_from_a_newer_host_is_refused(options: PgLedgerOptions) -> None:
    PgLedger(options, owner="a", heartbeat=False).close()
    with psycopg.connect(options.url) as db:
        db.execute(f'UPDATE "{options.schema}".ledger_schema_version SET version = 99')
    with pytest.raises(LedgerVersionError, match="99"):
        PgLedger(options, owner="b", heartbeat=False)


def test_intent_claims_are_serialised_across_hosts(hosts: Callable[..., PgLedger]) -> None:
    a, b = hosts("host-a"), hosts("host-b")
    call = IntentCall(key="refund:A100", scope=IntentScope.TENANT, scope_id="", window_s=None)
    assert Intents(a).claim(call, tenant="acme", idempotency_key="k1", override=False) == Proceed()
    # a claimed and has not reached begin yet: b must not take the intent over meanwhile.
    assert Intents(b).claim(call, tenant="acme", idempotency_key="k2", override=False) == Pending("k1")


def test_retention_prunes_settled_entries_never_running_ones(hosts: Callable[..., PgLedger]) -> None:
    a = hosts("host-a")
    _begin(a, "done", fencing_token=1)
    a.finish("done", Outcome.success("1"), tenant="acme")
    _begin(a, "running", run_id="run-2", fencing_token=1)
    _begin(a, "failed", run_id="run-3", fencing_token=1)
    a.finish("failed", Outcome.error(ErrorCode.PERMANENT, "no"), tenant="acme")
    counts = a.prune(cutoff_ns=time.time_ns() + 1)
    assert counts == LedgerPruneCounts(operations=2, fences=2)  # run-1 and run-3 have no entry left
    assert a.get("done", tenant="acme") is None and a.get("failed", tenant="acme") is None
    assert a.get("running", tenant="acme") is not None
    assert a.prune(cutoff_ns=0) == LedgerPruneCounts()


def test_a_lost_connection_fails_one_call_and_the_next_reconnects(
    hosts: Callable[..., PgLedger], options: PgLedgerOptions
) -> None:
    a = hosts("host-a")
    _begin(a)
    with psycopg.connect(options.url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid != pg_backend_pid()"
            " AND datname = current_database() AND query NOT ILIKE '%%pg_stat_activity%%'"
        )
    with pytest.raises(LedgerUnavailable, match="get failed"):
        a.get("k1", tenant="acme")
    assert a.get("k1", tenant="acme") is not None


def test_a_closed_ledger_refuses_calls(hosts: Callable[..., PgLedger]) -> None:
    a = hosts("host-a")
    a.close()
    a.close()
    assert a.closed
    with pytest.raises(LedgerUnavailable, match="closed"):
        a.get("k1")


def test_an_unreachable_database_is_a_clear_error_without_the_password() -> None:
    options = PgLedgerOptions(url="postgresql://agent:s3cr3t-pw@127.0.0.1:1/ledger", schema="pool")
    with pytest.raises(LedgerUnavailable) as caught:
        PgLedger(options, owner="a")
    message = str(caught.value)
    assert "s3cr3t-pw" not in message and "agent:***@127.0.0.1:1" in message and "open failed" in message


def test_a_password_the_server_echoes_back_is_scrubbed(pg_database: str) -> None:
    # The server names the missing database in its message; here that name is the password.
    base = pg_database.rsplit("/", 1)[0].replace("postgres@", "postgres:Zq9secret@", 1)
    with pytest.raises(LedgerUnavailable) as caught:
        PgLedger(PgLedgerOptions(url=f"{base}/Zq9secret", schema="pool"), owner="a")
    driver_text = str(caught.value).split("open failed", 1)[1]  # the URL before it names the database
    assert "Zq9secret" not in driver_text and '"***"' in driver_text and "OperationalError" in driver_text


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"url": "mysql://u:pw@h/db"}, "postgresql://"),
        ({"url": "postgresql:///db?password=pw"}, "postgresql://"),
        ({"url": "postgresql://u@h/db", "schema": 'x"; DROP TABLE y; --'}, "invalid ledger schema"),
        ({"url": "postgresql://u@h/db", "schema": "Upper"}, "invalid ledger schema"),
        ({"url": "postgresql://u@h/db", "owner_ttl_s": 0}, "positive"),
        ({"url": "postgresql://u@h/db", "owner_ttl_s": float("nan")}, "positive"),
    ],
)
def test_bad_options_are_refused_without_the_password(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match) as caught:
        PgLedgerOptions(**kwargs)
    assert "pw" not in str(caught.value).replace("postgresql://", "")


def test_urls_are_redacted_in_the_authority_and_the_query() -> None:
    assert redact_url("postgresql://u:p%40ss@h:5432/db?sslmode=require&password=x") == (
        "postgresql://u:***@h:5432/db?sslmode=require&password=***"
    )
    assert redact_url("postgresql://u@h/db") == "postgresql://u@h/db"
    assert "secret" not in repr(PgLedgerOptions(url="postgresql://u:secret@h/db"))


async def test_an_in_process_host_on_the_shared_ledger_prunes_it_and_writes_no_sqlite_file(
    options: PgLedgerOptions, tmp_path: Path
) -> None:
    with PgLedger(options, owner="life-1", heartbeat=False) as ledger:
        _begin(ledger, "settled")
        ledger.finish("settled", Outcome.success("{}"), tenant="acme")
        _begin(ledger, "running", run_id="run-2")
    later = LedgerRetention(
        keep_s=MIN_KEEP_S, interval_s=0.05, clock_ns=lambda: time.time_ns() + int((MIN_KEEP_S + 60) * 1e9)
    )
    async with ToolHost(tools={}, data_dir=tmp_path, ledger_retention=later, shared_ledger=options) as host:
        await host.start("127.0.0.1:0")
        reader = PgLedger(options, owner="reader", heartbeat=False)
        try:
            deadline = time.monotonic() + 10
            while reader.get("settled", tenant="acme") is not None:
                assert time.monotonic() < deadline, "the host never pruned the shared ledger"
                await asyncio.sleep(0.05)
            assert reader.get("running", tenant="acme") is not None  # never a RUNNING entry
        finally:
            reader.close()
    assert not (tmp_path / LEDGER_FILE).exists()


def _terminate_ledger_connections(options: PgLedgerOptions) -> None:
    """Cut every other connection to the test database, as a PostgreSQL restart would."""
    with psycopg.connect(options.url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE pid != pg_backend_pid() AND datname = current_database()"
        )


def _beat_ns(options: PgLedgerOptions, owner: str) -> int | None:
    with psycopg.connect(options.url) as db:
        row = db.execute(
            f'SELECT beat_ns FROM "{options.schema}".hosts WHERE owner = %s', (owner,)
        ).fetchone()
    return None if row is None else int(row[0])


def test_the_heartbeat_survives_a_lost_connection(
    options: PgLedgerOptions, caplog: pytest.LogCaptureFixture
) -> None:
    fast = PgLedgerOptions(url=options.url, schema=options.schema, owner_ttl_s=0.3)
    with PgLedger(fast, owner="host-a") as ledger:
        first = _beat_ns(fast, "host-a")
        assert first is not None
        _wait_until(lambda: (_beat_ns(fast, "host-a") or 0) > first)
        _terminate_ledger_connections(fast)
        cut = _beat_ns(fast, "host-a") or 0
        # It reconnects and beats again; a failed beat is one warning naming the error's class only.
        _wait_until(lambda: (_beat_ns(fast, "host-a") or 0) > cut)
        with pytest.raises(LedgerUnavailable):
            ledger.get("k1")  # the loop's connection was cut too: one call fails ...
        assert ledger.get("k1") is None  # ... and the next one reconnects
    warnings = [r.getMessage() for r in caplog.records if "heartbeat failed" in r.getMessage()]
    assert warnings and all("postgresql://" not in message for message in warnings)
    assert _beat_ns(fast, "host-a") is None  # signed off at close


def test_a_host_without_psycopg_says_which_extra_to_install(
    options: PgLedgerOptions, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "agentrt.toolhost._ledger_pg", None)  # import fails as if missing

    async def start() -> None:
        host = ToolHost(tools={}, data_dir=tmp_path, shared_ledger=options)
        try:
            await host.start("127.0.0.1:0")
        finally:
            await host.stop(0)

    with pytest.raises(LedgerUnavailable, match=r"agentrt-toolhost\[postgres\]"):
        asyncio.run(start())


async def test_a_finish_the_database_refuses_leaves_the_entry_running_which_a_retry_reads_as_unknown(
    options: PgLedgerOptions, tmp_path: Path
) -> None:
    holding, release = threading.Event(), threading.Event()

    def write(args: WriteArgs, ctx: ToolContext) -> int:
        holding.set()
        release.wait(10)
        return args.n

    tools = {"pool.write": tool(name="pool.write", description="w", side_effect=SideEffect.WRITE)(write)}
    async with ToolHost(tools=tools, data_dir=tmp_path, shared_ledger=options) as host:
        await host.start("127.0.0.1:0")
        assert host.address is not None
        async with grpc.aio.insecure_channel(host.address) as channel:
            stub = ToolHostServiceStub(channel)
            request = InvokeToolRequest(tool="pool.write", arguments_json='{"n": 7}')
            metadata = [("x-agentrt-idempotency-key", "k-cut")]
            call = asyncio.ensure_future(stub.InvokeTool(request, metadata=metadata, timeout=30))
            assert await asyncio.to_thread(holding.wait, 10)
            await asyncio.to_thread(_terminate_ledger_connections, options)  # the finish will fail
            release.set()
            answer = await call
            assert answer.result_json == "7"  # the caller still hears what the tool did
            retry = await stub.InvokeTool(request, metadata=metadata, timeout=30)
            assert (
                retry.error.code == tool_pb2.TOOL_ERROR_CODE_TRANSIENT
                and "outcome unknown" in retry.error.message
            )
            status = await stub.GetOperation(GetOperationRequest(idempotency_key="k-cut"), timeout=10)
            assert status.operation.status == tool_pb2.OPERATION_STATUS_RUNNING


async def test_a_ledger_outage_before_the_call_starts_is_a_transient_error_and_nothing_ran(
    options: PgLedgerOptions, tmp_path: Path
) -> None:
    ran: list[int] = []

    def write(args: WriteArgs, ctx: ToolContext) -> int:
        ran.append(args.n)
        return args.n

    tools = {"pool.write": tool(name="pool.write", description="w", side_effect=SideEffect.WRITE)(write)}
    async with ToolHost(tools=tools, data_dir=tmp_path, shared_ledger=options) as host:
        await host.start("127.0.0.1:0")
        assert host.address is not None
        async with grpc.aio.insecure_channel(host.address) as channel:
            stub = ToolHostServiceStub(channel)
            request = InvokeToolRequest(tool="pool.write", arguments_json='{"n": 3}')
            metadata = [("x-agentrt-idempotency-key", "k-outage"), ("x-agentrt-run-id", "run-1")]
            await asyncio.to_thread(_terminate_ledger_connections, options)
            refused = await stub.InvokeTool(request, metadata=metadata, timeout=30)
            assert refused.error.code == tool_pb2.TOOL_ERROR_CODE_TRANSIENT
            assert json.loads(refused.error.details_json) == {"ledger_unavailable": True}
            assert "postgres" not in refused.error.message and ran == []
            again = await stub.InvokeTool(request, metadata=metadata, timeout=30)  # reconnected
            assert again.result_json == "3" and ran == [3]
        assert host.counters["ledger_unavailable"] == 1


def test_a_role_with_table_rights_only_runs_on_a_ledger_set_up_beforehand(options: PgLedgerOptions) -> None:
    PgLedger(options, owner="setup", heartbeat=False).close()  # an operator's first start (or a Job)
    role = f"ledger_dml_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(options.url, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
        admin.execute(f'GRANT USAGE ON SCHEMA "{options.schema}" TO "{role}"')
        admin.execute(
            f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{options.schema}" TO "{role}"'
        )
    try:
        url = options.url.replace("postgres@", f"{role}@", 1)
        limited = PgLedgerOptions(url=url, schema=options.schema)
        with PgLedger(limited, owner="host-a", heartbeat=False) as ledger:
            assert isinstance(_begin(ledger), Start)
        fresh = PgLedgerOptions(url=url, schema=f"t_{uuid.uuid4().hex[:12]}")
        with pytest.raises(LedgerUnavailable, match=r"open failed \(InsufficientPrivilege"):
            PgLedger(fresh, owner="host-b", heartbeat=False)  # it may not create a new one
    finally:
        with psycopg.connect(options.url, autocommit=True) as admin:
            admin.execute(f'DROP OWNED BY "{role}"')
            admin.execute(f'DROP ROLE "{role}"')


def test_the_password_is_known_in_every_form_it_may_reach_a_driver_message() -> None:
    options = PgLedgerOptions(url="postgresql://u:p%40ss@h/db?password=q%2Fw&sslmode=require")
    assert set(options.secrets) == {"p%40ss", "p@ss", "q/w"}  # parse_qsl decodes the query already
    assert PgLedgerOptions(url="postgresql://u@h/db").secrets == ()
