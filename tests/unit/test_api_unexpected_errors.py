"""Exceptions no handler expected: a store that is away is UNAVAILABLE, a full disk RESOURCE_EXHAUSTED,
both with RetryInfo; a bug is INTERNAL; none carries the exception's text; gRPC's own errors about
the call (the client left mid-write) pass through to gRPC, unlogged."""

from __future__ import annotations

import errno
import logging
import sqlite3

import grpc.aio
import psycopg.errors
import pytest
import sqlalchemy.exc
from google.rpc import code_pb2, error_details_pb2  # type: ignore[import-untyped]
from grpc._cython import cygrpc

from agentrt.server.api._errors import (
    DOMAIN,
    STORAGE_FULL_RETRY_S,
    UNAVAILABLE_RETRY_S,
    abort_internal,
    unexpected_status,
)

SECRET_URL = "postgresql://app:hunter2@db.internal:5432/agentrt"


def _details(status: object) -> tuple[error_details_pb2.ErrorInfo, error_details_pb2.RetryInfo | None]:
    info, retry = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
    details = list(status.details)  # type: ignore[attr-defined]
    assert details[0].Unpack(info)
    if len(details) == 1:
        return info, None
    assert details[1].Unpack(retry)
    return info, retry


def _admin_shutdown() -> sqlalchemy.exc.DBAPIError:
    orig = psycopg.errors.AdminShutdown(f"terminating connection due to administrator command ({SECRET_URL})")
    return sqlalchemy.exc.DBAPIError.instance("SELECT", {}, orig, psycopg.Error, connection_invalidated=True)


def test_a_lost_database_connection_is_unavailable_with_retry_info() -> None:
    reset = ConnectionResetError(errno.ECONNRESET, SECRET_URL)
    for exc in (_admin_shutdown(), _admin_shutdown().orig, reset):
        status = unexpected_status(exc)
        assert status.code == code_pb2.UNAVAILABLE
        info, retry = _details(status)
        assert (info.reason, info.domain) == ("UNAVAILABLE", DOMAIN)
        assert retry is not None and retry.retry_delay.ToTimedelta().total_seconds() == UNAVAILABLE_RETRY_S
        assert "hunter2" not in str(status) and "OperationalError" not in status.message


def test_a_full_disk_is_resource_exhausted_with_retry_info() -> None:
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = sqlite3.SQLITE_FULL  # as SQLite sets it (made real in test_store_errors)
    for exc in (
        sqlalchemy.exc.DBAPIError.instance("INSERT", {}, full, sqlite3.Error),
        OSError(errno.ENOSPC, "No space left on device"),
        psycopg.errors.DiskFull("could not extend file"),
    ):
        status = unexpected_status(exc)
        assert status.code == code_pb2.RESOURCE_EXHAUSTED
        info, retry = _details(status)
        assert info.reason == "STORAGE_FULL"
        assert retry is not None and retry.retry_delay.ToTimedelta().total_seconds() == STORAGE_FULL_RETRY_S


def test_a_bug_is_internal_without_retry_info_or_text() -> None:
    status = unexpected_status(ValueError(f"cannot parse {SECRET_URL}"))
    assert status.code == code_pb2.INTERNAL and status.message == "internal error"
    info, retry = _details(status)
    assert info.reason == "INTERNAL" and retry is None
    assert "hunter2" not in str(status)
    # SQLite's OperationalError for a missing table is a bug, not the environment.
    missing = sqlite3.OperationalError("no such table: runs")
    missing.sqlite_errorcode = sqlite3.SQLITE_ERROR
    assert unexpected_status(missing).code == code_pb2.INTERNAL


@pytest.mark.parametrize(
    "error",
    [
        cygrpc.ExecuteBatchError('Failed "execute_batch": (<SendMessageOperation>,)'),  # the client left
        grpc.aio.UsageError("RPC already finished."),
        grpc.aio.AbortError("Locally aborted."),
    ],
)
async def test_grpc_errors_about_the_call_itself_pass_through_unlogged(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    assert isinstance(error, grpc.aio.BaseError)
    with caplog.at_level(logging.DEBUG, logger="agentrt"), pytest.raises(type(error)) as raised:
        # The context is never touched: gRPC itself finishes a call that its client left.
        await abort_internal(None, error)  # type: ignore[arg-type]
    assert raised.value is error
    assert not caplog.records
