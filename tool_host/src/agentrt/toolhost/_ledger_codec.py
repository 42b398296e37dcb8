"""Turning ledger rows into records and outcomes into columns, sealing outcome columns on the way.

Shared by the SQLite and PostgreSQL ledgers so both store and read the very same values: with a
:class:`~agentrt.toolhost._cipher.PayloadCipher` the outcome columns (``result_json``,
``error_message``, ``error_details_json``) are sealed, bound to their tenant, key and column
(:func:`~agentrt.toolhost._ledger_types.sealing_aad`); ids, statuses and times stay in clear.
"""

from __future__ import annotations

from typing import Any

from agentrt.toolhost._cipher import PayloadCipher
from agentrt.toolhost._errors import ErrorCode
from agentrt.toolhost._ledger_types import OperationRecord, OperationStatus, sealing_aad
from agentrt.toolhost._outcome import Failure, Outcome

__all__ = ["LedgerCodec"]


class LedgerCodec:
    """Encodes outcomes into ledger columns and rows into records.

    Args:
        cipher: Seals the outcome columns when given; values written without one still read.
    """

    def __init__(self, cipher: PayloadCipher | None) -> None:
        self._cipher = cipher

    def outcome_columns(
        self, tenant: str, idempotency_key: str, outcome: Outcome
    ) -> tuple[str, str | None, str | None, str | None, str | None]:
        """``(status, result_json, error_code, error_message, error_details_json)`` of ``outcome``."""
        failure = outcome.failure
        result_json = outcome.result_json
        message = failure.message if failure else None
        details_json = failure.details_json if failure else None
        if self._cipher is not None:
            result_json = self._seal(result_json, tenant, idempotency_key, "result_json")
            message = self._seal(message, tenant, idempotency_key, "error_message")
            details_json = self._seal(details_json, tenant, idempotency_key, "error_details_json")
        return (
            OperationStatus.FAILED.value if failure else OperationStatus.SUCCEEDED.value,
            result_json,
            failure.code.value if failure else None,
            message,
            details_json,
        )

    def _seal(self, value: str | None, tenant: str, idempotency_key: str, column: str) -> str | None:
        assert self._cipher is not None
        if value is None:
            return None
        return self._cipher.seal(value, aad=sealing_aad(tenant, idempotency_key, column))

    def _open(self, row: Any, column: str) -> str | None:
        value: str | None = row[column]
        if value is None or self._cipher is None:
            return value
        # Values from before encryption was turned on have no prefix and come back as they are.
        return self._cipher.open(value, aad=sealing_aad(row["tenant"], row["idempotency_key"], column))

    def record(self, row: Any) -> OperationRecord:
        """The record of a row of ``operations`` (any mapping from column name to value)."""
        status = OperationStatus(row["status"])
        outcome: Outcome | None = None
        if status is OperationStatus.SUCCEEDED:
            outcome = Outcome.success(self._open(row, "result_json") or "")
        elif status is OperationStatus.FAILED:
            outcome = Outcome(
                failure=Failure(
                    code=ErrorCode(row["error_code"]),
                    message=self._open(row, "error_message") or "",
                    details_json=self._open(row, "error_details_json") or "",
                )
            )
        return OperationRecord(
            tenant=row["tenant"],
            idempotency_key=row["idempotency_key"],
            tool=row["tool"],
            input_hash=row["input_hash"],
            run_id=row["run_id"],
            call_id=row["call_id"],
            status=status,
            outcome=outcome,
            owner=row["owner"],
            executions=int(row["executions"]),
            create_time_ns=int(row["create_time_ns"]),
            update_time_ns=int(row["update_time_ns"]),
        )
