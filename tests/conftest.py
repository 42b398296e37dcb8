"""Shared fixtures: real databases (SQLite file, PostgreSQL schema per test), isolated per test run.

PostgreSQL is this machine's server (127.0.0.1:5432, user postgres). Each test
run creates its own database and drops it at the end; each test gets its own
schema inside it. Under ``CI=true`` a missing server fails the tests that need
it; elsewhere they skip.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

PG_ADMIN_URL = os.environ.get("AGENTRT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def _pg_missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"PostgreSQL is required under CI=true: {reason}")
    pytest.skip(f"PostgreSQL not available: {reason}")


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A database of this test run's own; yields its URL (without driver)."""
    name = f"agentrt_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    try:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        _pg_missing(str(exc).strip())
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    yield f"{base}/{name}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url(pg_database: str) -> str:
    """A fresh schema in the run's database; the URL pins search_path to it."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return f"{pg_database}?options=-csearch_path%3D{schema}"


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'agentrt.sqlite'}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Every store test runs on both backends."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'agentrt.sqlite'}"
    return str(request.getfixturevalue("pg_url"))


REDIS_TEST_URL = os.environ.get("AGENTRT_TEST_REDIS", "redis://127.0.0.1:6379")


@pytest.fixture
def redis_url() -> str:
    """The machine's Redis (fails under CI=true when it is missing, else skips)."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(REDIS_TEST_URL)
    try:
        socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), 2).close()
    except OSError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Redis is required under CI=true: {exc}")
        pytest.skip(f"Redis not available: {exc}")
    return REDIS_TEST_URL


@pytest.fixture
def redis_prefix() -> str:
    """A key prefix of this test's own: tests sharing one Redis never hear each other."""
    return f"agentrt-test-{uuid.uuid4().hex[:10]}:"


@pytest.fixture
def redis_server_binary() -> None:
    """Tests that start (and kill) their own redis-server need the binary."""
    from agentrt.testing.redis_server import redis_server_available

    if not redis_server_available():
        if os.environ.get("CI") == "true":
            pytest.fail("redis-server is required under CI=true")
        pytest.skip("redis-server not installed")
