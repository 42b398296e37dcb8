"""The run's trace context in the store (migration 0011, both backends), on the API's Run, and the
processes' refusal of tracing settings they cannot use (exit 2, nothing written)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from agentrt.server.api._convert import run_to_proto
from agentrt.server.store import Store
from agentrt.server.store._db import normalise_url
from tests.integration.test_store import run_values
from tests.integration.test_store_waits import alembic

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_migration_0011_adds_the_trace_context_to_existing_rows_and_downgrades(db_url: str) -> None:
    alembic(db_url, "upgrade", "0010")
    engine = create_engine(normalise_url(db_url))
    try:
        row = run_values("old", owner=None, phase="QUEUED")
        row.update(revision=1, last_seq=1, created_ms=1, updated_ms=1, created_by="")
        with engine.begin() as conn:
            columns = ", ".join(row)
            conn.execute(
                text(f"INSERT INTO runs ({columns}) VALUES ({', '.join(':' + c for c in row)})"), row
            )
        alembic(db_url, "upgrade", "head")
        with engine.begin() as conn:
            found = conn.execute(text("SELECT trace_context FROM runs WHERE run_id = 'old'")).one()
        assert tuple(found) == (None,)  # a run from before tracing: its resumes start a new trace
        alembic(db_url, "downgrade", "0010")
        assert "trace_context" not in {c["name"] for c in inspect(engine).get_columns("runs")}
        alembic(db_url, "upgrade", "head")
    finally:
        engine.dispose()


async def test_the_row_keeps_the_runs_traceparent_and_the_api_shows_its_trace_id(db_url: str) -> None:
    store = await Store.open(db_url)
    try:
        traced, _ = await store.create_run(
            run_values("traced") | {"trace_context": TRACEPARENT}, [("run.started", "{}")], 1000
        )
        untraced, _ = await store.create_run(run_values("untraced"), [("run.started", "{}")], 1000)
        assert traced.trace_context == TRACEPARENT
        read = await store.get_run("traced")
        assert read is not None and read.trace_context == TRACEPARENT  # what another replica reads
        assert run_to_proto(read).trace_id == "0af7651916cd43dd8448eb211c80319c"
        again = await store.get_run("untraced")
        assert again is not None and again.trace_context is None
        assert run_to_proto(again).trace_id == "" and run_to_proto(untraced).trace_id == ""
    finally:
        await store.close()


def _env(**otel: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTRT_"))}
    return env | otel


@pytest.mark.parametrize(
    ("otel", "words"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "exporter 'zipkin'"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "protocol"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER_ARG": "lots"}, "OTEL_TRACES_SAMPLER_ARG"),
    ],
)
def test_both_processes_refuse_tracing_variables_they_cannot_use(
    tmp_path: Path, otel: dict[str, str], words: str
) -> None:
    db = tmp_path / "never.sqlite"
    runtime = subprocess.run(
        [sys.executable, "-m", "agentrt.server", "--listen", "127.0.0.1:0", "--db-url", f"sqlite:///{db}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(**otel),
    )
    assert runtime.returncode == 2, runtime.stderr
    assert "tracing:" in runtime.stderr and words in runtime.stderr
    assert runtime.stdout == "" and not db.exists()
    data = tmp_path / "host"
    host = subprocess.run(
        [sys.executable, "-m", "agentrt.toolhost", "--no-entrypoints", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(**otel),
    )
    assert host.returncode == 2, host.stderr
    assert words in host.stderr and host.stdout == ""


def test_the_runtime_refuses_a_bad_tracing_section(tmp_path: Path) -> None:
    config = tmp_path / "agentrt.toml"
    config.write_text('[tracing]\nexporter = "jaeger"\n')
    done = subprocess.run(
        [sys.executable, "-m", "agentrt.server", "--config", str(config)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
    )
    assert done.returncode == 2 and "tracing.exporter" in done.stderr, done.stderr
