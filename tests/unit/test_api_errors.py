"""Domain errors become google.rpc statuses: RESOURCE_EXHAUSTED carries ErrorInfo and RetryInfo."""

from __future__ import annotations

from google.rpc import code_pb2, error_details_pb2  # type: ignore[import-untyped]

from agentrt.server.api._errors import DOMAIN, to_status
from agentrt.server.core import OverLimit


def test_resource_exhausted_has_error_info_and_retry_info() -> None:
    exc = OverLimit(
        "too many", reason="TOO_MANY_QUEUED_RUNS", retry_after_s=2.25, metadata={"scope": "tenant"}
    )

    status = to_status(exc)

    assert status.code == code_pb2.RESOURCE_EXHAUSTED and status.message == "too many"
    info, retry = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
    assert status.details[0].Unpack(info) and status.details[1].Unpack(retry)
    assert (info.reason, info.domain, dict(info.metadata)) == (
        "TOO_MANY_QUEUED_RUNS",
        DOMAIN,
        {"scope": "tenant"},
    )
    assert retry.retry_delay.ToTimedelta().total_seconds() == 2.25
