"""``agentrt migrate``, the root ``alembic.ini`` and ``migrate = "auto" | "check" | "off"`` on real
databases: PostgreSQL (a schema per test) and SQLite files, with runs and events in place."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine, inspect
from sqlalchemy.exc import OperationalError

from agentrt.client.cli import main as agentrt_main
from agentrt.server._migrate_main import EXIT_ERROR, EXIT_NOT_AT_HEAD, EXIT_OK
from agentrt.server._prune_main import main as prune_main
from agentrt.server.store import (
    SchemaNotCurrent,
    Store,
    describe_database_error,
    open_database,
    pin_driver,
    read_schema_verdict,
    shipped_revisions,
)
from agentrt.server.store._migrations import MIGRATION_LOCK_ID
from agentrt.testing import RuntimeProcess

ROOT = Path(__file__).resolve().parents[2]
HEAD = shipped_revisions()[-1].revision
PREVIOUS = shipped_revisions()[-2].revision
DOWN_PATH = [r.revision for r in reversed(shipped_revisions())][1:]  # head's predecessor first


def migrate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Runs ``agentrt migrate ARGS`` through the agentrt CLI's dispatch, in this process."""
    code = agentrt_main(["migrate", *args])
    out, err = capsys.readouterr()
    return code, out, err


def revision_of(url: str) -> tuple[str, ...]:
    return read_schema_verdict(pin_driver(url)).current


def tables_of(url: str) -> set[str]:
    engine = create_engine(pin_driver(url))
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def run_values(run_id: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "tenant_id": "acme",
        "agent_name": "refunds",
        "agent_spec": "{}",
        "input": f"input of {run_id}",
        "output": "",
        "reason": "",
        "phase": "QUEUED",
        "budgets": "{}",
        "usage": "{}",
        "request_key": f"key-{run_id}",
        "session_id": None,
        "metadata": "{}",
        "deadline_ms": 10**13,
        "lease_owner": "w1",
        "lease_expires_ms": 10**13,
        "lease_generation": 1,
        "cancel_requested_ms": None,
        "cancel_reason": None,
        "state_version": 1,
        "runtime_version": "0",
        "agent_config_hash": "h",
    }


async def write_runs(url: str, run_ids: list[str]) -> None:
    """Two runs with three events each, through the store's own API."""
    store = await Store.open(url, migrate="off")
    try:
        for run_id in run_ids:
            await store.create_run(run_values(run_id), [("run.started", '{"n": 1}')], 1000)
            await store.append(
                run_id,
                expected_revision=1,
                owner="w1",
                first_seq=2,
                new_events=[("step.started", '{"n": 2}'), ("model.completed", '{"n": 3}')],
                values={"phase": "MODEL_STEP"},
                now_ms=1001,
            )
    finally:
        await store.close()


async def read_runs(url: str, run_ids: list[str]) -> list[tuple[Any, ...]]:
    store = await Store.open(url, migrate="check")
    try:
        found: list[tuple[Any, ...]] = []
        for run_id in run_ids:
            record = await store.get_run(run_id)
            assert record is not None, run_id
            events = [(e.seq, e.type, e.payload) for e in await store.read_events(run_id)]
            found.append(
                (record.run_id, record.tenant_id, record.input, record.phase, record.revision, events)
            )
        return found
    finally:
        await store.close()


# -- upgrade, check, current, history -------------------------------------------------------------


@pytest.mark.postgres
def test_upgrade_from_empty_then_check_and_current_report_head(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = migrate(capsys, "--db-url", pg_url, "check")
    assert code == EXIT_NOT_AT_HEAD and "no agentrt schema" in err and "agentrt migrate upgrade" in err
    assert len(err.strip().splitlines()) == 1

    code, out, _ = migrate(capsys, "--db-url", pg_url, "upgrade")
    assert code == EXIT_OK and out.strip() == f"upgraded none -> {HEAD}"
    assert {"runs", "run_events", "run_signals", "run_checkpoints", "run_payloads"} <= tables_of(pg_url)

    code, out, _ = migrate(capsys, "--db-url", pg_url, "current")
    assert code == EXIT_OK and out.strip() == f"{HEAD} (head)"
    code, out, _ = migrate(capsys, "--db-url", pg_url, "check")
    assert code == EXIT_OK and HEAD in out
    code, out, _ = migrate(capsys, "--db-url", pg_url, "upgrade")
    assert code == EXIT_OK and out.strip() == f"already at {HEAD}; nothing to do"


def test_history_lists_every_revision_oldest_first_without_a_database(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = migrate(capsys, "--db-url", "postgresql://nobody@127.0.0.1:1/none", "history")
    lines = out.strip().splitlines()
    assert code == EXIT_OK
    assert [line.split()[0] for line in lines] == [r.revision for r in shipped_revisions()]
    assert lines[0].startswith("0001  Initial schema") and lines[-1].endswith("(head)")


def test_config_and_env_name_the_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from_file = tmp_path / "from-file.sqlite"
    config = tmp_path / "server.toml"
    config.write_text(f'db_url = "sqlite:///{from_file}"\n')
    assert migrate(capsys, "--config", str(config), "upgrade")[0] == EXIT_OK
    assert revision_of(f"sqlite:///{from_file}") == (HEAD,)

    from_env = tmp_path / "from-env.sqlite"
    monkeypatch.setenv("AGENTRT_DB_URL", f"sqlite:///{from_env}")
    assert migrate(capsys, "--config", str(config), "upgrade", PREVIOUS)[0] == EXIT_OK
    assert revision_of(f"sqlite:///{from_env}") == (PREVIOUS,)


def test_the_options_may_follow_the_action_as_deploy_runs_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before, after = tmp_path / "before.sqlite", tmp_path / "after.sqlite"
    config = tmp_path / "server.toml"
    config.write_text(f'db_url = "sqlite:///{before}"\n')
    assert migrate(capsys, "upgrade", PREVIOUS, "--config", str(config))[0] == EXIT_OK
    assert revision_of(f"sqlite:///{before}") == (PREVIOUS,)
    assert migrate(capsys, "check", "--config", str(config))[0] == EXIT_NOT_AT_HEAD
    # Given on both sides, the one after the action wins, as an operator reading it expects.
    assert (
        migrate(capsys, "--db-url", f"sqlite:///{before}", "upgrade", "--db-url", f"sqlite:///{after}")[0]
        == 0
    )
    assert revision_of(f"sqlite:///{after}") == (HEAD,) and revision_of(f"sqlite:///{before}") == (PREVIOUS,)


# -- down and up with data in place ----------------------------------------------------------------


@pytest.mark.postgres
def test_downgrade_to_previous_and_upgrade_again_keeps_runs_and_events(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert migrate(capsys, "--db-url", pg_url, "upgrade")[0] == EXIT_OK
    run_ids = ["run-a", "run-b"]
    asyncio.run(write_runs(pg_url, run_ids))
    before = asyncio.run(read_runs(pg_url, run_ids))

    code, out, _ = migrate(capsys, "--db-url", pg_url, "downgrade", PREVIOUS)
    assert code == EXIT_OK and out.strip() == f"downgraded {HEAD} -> {PREVIOUS}"
    code, _, err = migrate(capsys, "--db-url", pg_url, "check")
    assert code == EXIT_NOT_AT_HEAD and f"at revision {PREVIOUS}, behind head {HEAD}" in err
    # The servers' own refusal, in the same words.
    with pytest.raises(SchemaNotCurrent, match="agentrt migrate upgrade"):
        open_database(pg_url, migrate="check")

    code, out, _ = migrate(capsys, "--db-url", pg_url, "upgrade")
    assert code == EXIT_OK and out.strip() == f"upgraded {PREVIOUS} -> {HEAD}"
    assert asyncio.run(read_runs(pg_url, run_ids)) == before


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_every_migration_downgrades_with_rows_in_place_and_upgrades_back(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = (
        f"sqlite:///{tmp_path / 'walk.sqlite'}" if backend == "sqlite" else request.getfixturevalue("pg_url")
    )
    assert migrate(capsys, "--db-url", url, "upgrade")[0] == EXIT_OK
    asyncio.run(write_runs(url, ["run-a"]))
    before = asyncio.run(read_runs(url, ["run-a"]))
    for target in DOWN_PATH:
        code, out, err = migrate(capsys, "--db-url", url, "downgrade", "-1")
        assert (code, out.strip()) == (EXIT_OK, f"downgraded {_above(target)} -> {target}"), err
        assert revision_of(url) == (target,)
    code, out, _ = migrate(capsys, "--db-url", url, "upgrade")
    assert code == EXIT_OK and out.strip() == f"upgraded 0001 -> {HEAD}"
    assert asyncio.run(read_runs(url, ["run-a"])) == before
    # And the last step down, which takes the tables with it.
    assert migrate(capsys, "--db-url", url, "downgrade", "base")[0] == EXIT_OK
    assert revision_of(url) == () and not {"runs", "run_events"} & tables_of(url)


def _above(revision: str) -> str:
    ids = [r.revision for r in shipped_revisions()]
    return ids[ids.index(revision) + 1]


# -- refusals and errors change nothing -------------------------------------------------------------


@pytest.mark.postgres
def test_unknown_revisions_are_refused_and_change_nothing(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert migrate(capsys, "--db-url", pg_url, "upgrade", PREVIOUS)[0] == EXIT_OK
    for args in (["upgrade", "nosuchrev"], ["downgrade", "nosuchrev"], ["downgrade", HEAD]):
        code, out, err = migrate(capsys, "--db-url", pg_url, *args)
        assert code == EXIT_ERROR and out == "", args
        assert (
            err.startswith(f"agentrt migrate: cannot {args[0]} to {args[1]!r}: ") and "Traceback" not in err
        )
        assert revision_of(pg_url) == (PREVIOUS,)


@pytest.mark.postgres
def test_a_revision_from_a_newer_agentrt_fails_check_and_blocks_upgrade(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert migrate(capsys, "--db-url", pg_url, "upgrade")[0] == EXIT_OK
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    code, _, err = migrate(capsys, "--db-url", pg_url, "check")
    assert code == EXIT_NOT_AT_HEAD and "9999, which this agentrt does not know" in err
    code, _, err = migrate(capsys, "--db-url", pg_url, "upgrade")
    assert code == EXIT_ERROR and "9999" in err and "Traceback" not in err
    assert revision_of(pg_url) == ("9999",)


SECRET = "s3cr3t-pw"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (f"postgresql://agentrt:{SECRET}@127.0.0.1:1/agentrt", "cannot use the database at "),
        pytest.param(
            f"postgresql://postgres:{SECRET}@127.0.0.1:5432/no_such_db_agentrt",
            'database "no_such_db_agentrt" does not exist',
            marks=pytest.mark.postgres,
        ),
        (f"mysql://agentrt:{SECRET}@127.0.0.1/agentrt", "unsupported database URL scheme 'mysql'"),
        (f"::agentrt:{SECRET}@", "unusable db_url: not a database URL"),
    ],
)
@pytest.mark.parametrize("action", ["upgrade", "current", "check", "downgrade"])
def test_bad_or_unreachable_databases_give_one_line_without_the_password(
    url: str, expected: str, action: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [action, "base"] if action == "downgrade" else [action]
    code, out, err = migrate(capsys, "--db-url", url, *args)
    assert code == EXIT_ERROR and out == ""
    assert expected in err and SECRET not in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("agentrt migrate: ")


def test_reading_a_missing_sqlite_file_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'not' / 'there.sqlite'}"
    assert migrate(capsys, "--db-url", url, "current")[:2] == (EXIT_OK, "none\n")
    assert migrate(capsys, "--db-url", url, "check")[0] == EXIT_NOT_AT_HEAD
    assert not (tmp_path / "not").exists()


def test_a_sqlite_directory_that_cannot_be_made_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("")
    code, _, err = migrate(capsys, "--db-url", f"sqlite:///{tmp_path / 'a-file' / 'x.sqlite'}", "upgrade")
    assert code == EXIT_ERROR and err.startswith("agentrt migrate: cannot make the database's directory: ")
    assert str(tmp_path / "a-file") in err and len(err.strip().splitlines()) == 1


def test_usage_and_config_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = migrate(capsys, "--config", str(tmp_path / "missing.toml"), "check")
    assert code == EXIT_ERROR and "cannot read config file" in err
    assert migrate(capsys, "sideways")[0] == EXIT_ERROR
    assert migrate(capsys, "downgrade")[0] == EXIT_ERROR  # REV is required
    assert migrate(capsys)[0] == EXIT_ERROR


# -- the advisory lock ------------------------------------------------------------------------------


@pytest.mark.postgres
def test_upgrade_waits_for_the_migration_lock(pg_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with psycopg.connect(pg_url) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_ID,))
        result: list[int] = []
        worker = threading.Thread(
            target=lambda: result.append(agentrt_main(["migrate", "--db-url", pg_url, "upgrade"]))
        )
        worker.start()
        try:
            _wait_for_lock_waiter(pg_url)
            assert result == [] and revision_of(pg_url) == ()
        finally:
            holder.rollback()  # releases the lock
        worker.join(timeout=30)
    assert result == [EXIT_OK] and revision_of(pg_url) == (HEAD,)
    capsys.readouterr()


def _wait_for_lock_waiter(pg_url: str) -> None:
    """Polls pg_locks (bounded) until a backend waits on the migration lock."""
    query = (
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
        "AND objid = %s AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for _ in range(600):
            row = conn.execute(query, (MIGRATION_LOCK_ID,)).fetchone()
            if row is not None and row[0] > 0:
                return
            conn.execute("SELECT pg_sleep(0.05)")
    raise AssertionError("agentrt migrate upgrade never waited on the migration lock")


# -- migrate = "auto" | "check" | "off" -------------------------------------------------------------


def test_open_database_migrates_on_auto_refuses_on_check_and_leaves_alone_on_off(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'modes.sqlite'}"
    with pytest.raises(SchemaNotCurrent, match="no agentrt schema yet"):
        open_database(url, migrate="check")
    asyncio.run(open_database(url, migrate="off").dispose())
    assert revision_of(url) == () and "runs" not in tables_of(url)
    asyncio.run(open_database(url, migrate="auto").dispose())
    assert revision_of(url) == (HEAD,)
    asyncio.run(open_database(url, migrate="check").dispose())


@pytest.fixture
def stale_pg(pg_url: str, capsys: pytest.CaptureFixture[str]) -> Iterator[str]:
    assert migrate(capsys, "--db-url", pg_url, "upgrade", PREVIOUS)[0] == EXIT_OK
    yield pg_url


@pytest.mark.postgres
def test_a_server_with_migrate_check_refuses_a_stale_database_and_starts_once_migrated(
    stale_pg: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {**os.environ, "AGENTRT_MIGRATE": "check"}
    args = ["--db-url", stale_pg, "--listen", "127.0.0.1:0", "--metrics-listen", ""]
    refused = RuntimeProcess(args, cwd=tmp_path, env=env)
    try:
        assert refused.wait_exit(60) == 2
        stderr = refused.stderr_text()
        assert f"revision {PREVIOUS}, behind head {HEAD}" in stderr and "agentrt migrate upgrade" in stderr
        assert "Traceback" not in stderr
    finally:
        refused.close()
    assert revision_of(stale_pg) == (PREVIOUS,)  # check never migrates

    assert migrate(capsys, "--db-url", stale_pg, "upgrade")[0] == EXIT_OK
    started = RuntimeProcess(args, cwd=tmp_path, env=env)
    try:
        assert started.wait_ready(60)
    finally:
        assert started.stop() == 0
        started.close()


def test_a_server_that_cannot_reach_its_database_says_so_in_one_line(tmp_path: Path) -> None:
    url = f"postgresql://agentrt:{SECRET}@127.0.0.1:1/agentrt"
    process = RuntimeProcess(
        ["--db-url", url, "--listen", "127.0.0.1:0", "--metrics-listen", ""], cwd=tmp_path
    )
    try:
        assert process.wait_exit(60) == 2
        stderr = process.stderr_text()
        assert (
            "agentrt serve: cannot use the database at postgresql://agentrt:***@127.0.0.1:1/agentrt" in stderr
        )
        assert SECRET not in stderr and "Traceback" not in stderr
    finally:
        process.close()


def test_a_driver_echoing_the_password_is_masked() -> None:
    error = OperationalError("SELECT 1", {}, Exception(f"password {SECRET} rejected\nsecond line"))
    line = describe_database_error(error, f"postgresql://agentrt:{SECRET}@db/agentrt")
    assert (
        line
        == "cannot use the database at postgresql://agentrt:***@db/agentrt: Exception: password *** rejected"
    )


@pytest.mark.postgres
def test_prune_refuses_a_schema_not_at_head(stale_pg: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENTRT_RETENTION__ENDED_AFTER_S", "60")
        code = prune_main(["--db-url", stale_pg, "--dry-run"])
        _, err = capsys.readouterr()
        assert code == 2 and "behind head" in err and "agentrt migrate upgrade" in err
        patch.setenv("AGENTRT_MIGRATE", "off")  # the operator vouches for the schema
        assert prune_main(["--db-url", stale_pg, "--dry-run"]) == 0


# -- alembic -c alembic.ini -------------------------------------------------------------------------


def alembic(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    child_env = {k: v for k, v in os.environ.items() if k != "AGENTRT_DB_URL"}
    return subprocess.run(
        [sys.executable, "-m", "alembic", "-c", str(ROOT / "alembic.ini"), *args],
        cwd=ROOT,
        env={**child_env, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.postgres
def test_alembic_ini_migrates_a_postgres_schema(pg_url: str, tmp_path: Path) -> None:
    done = alembic("upgrade", "head", env={"AGENTRT_DB_URL": pg_url})
    assert done.returncode == 0, done.stderr
    assert revision_of(pg_url) == (HEAD,) and "runs" in tables_of(pg_url)
    # -x wins over the environment.
    elsewhere = tmp_path / "elsewhere.sqlite"
    done = alembic(
        "-x", f"db_url={pg_url}", "downgrade", "-1", env={"AGENTRT_DB_URL": f"sqlite:///{elsewhere}"}
    )
    assert done.returncode == 0, done.stderr
    assert revision_of(pg_url) == (PREVIOUS,) and not elsewhere.exists()
    done = alembic("-x", f"db_url={pg_url}", "current")
    assert done.returncode == 0 and done.stdout.strip() == PREVIOUS


def test_alembic_ini_without_a_url_says_how_to_give_one() -> None:
    done = alembic("current")
    assert done.returncode != 0 and "-x db_url=URL or set AGENTRT_DB_URL" in done.stderr


def test_alembic_ini_prints_sql_offline() -> None:
    done = alembic(
        "-x", "db_url=postgresql://nobody@127.0.0.1:1/none", "upgrade", f"{PREVIOUS}:{HEAD}", "--sql"
    )
    assert done.returncode == 0, done.stderr
    assert f"UPDATE alembic_version SET version_num='{HEAD}'" in done.stdout
