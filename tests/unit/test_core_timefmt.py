"""RFC 3339 text of event times: exact to the millisecond over the whole Timestamp range."""

from __future__ import annotations

from google.protobuf import timestamp_pb2
from hypothesis import given
from hypothesis import strategies as st

from agentrt.server.core._timefmt import parse_rfc3339_ms, rfc3339

# Timestamp's range: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z, in epoch milliseconds.
FIRST_MS = -62_135_596_800_000
LAST_MS = 253_402_300_799_999


def _read(text: str) -> int:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromJsonString(text)  # proto3 JSON's own parser: four-digit years, Z
    return stamp.ToMilliseconds()


@given(st.integers(min_value=FIRST_MS, max_value=LAST_MS))
def test_the_text_is_the_instant_to_the_millisecond(epoch_ms: int) -> None:
    text = rfc3339(epoch_ms)
    assert len(text) == 24 and text.endswith("Z")
    assert _read(text) == epoch_ms
    assert parse_rfc3339_ms(text) == epoch_ms


def test_far_instants_keep_their_milliseconds() -> None:
    # A float of the seconds rounds these (the 1970-relative form loses the last digit).
    assert rfc3339(50_048_619_977_128) == "3555-12-24T10:26:17.128Z"
    assert rfc3339(LAST_MS) == "9999-12-31T23:59:59.999Z"
    assert rfc3339(FIRST_MS) == "0001-01-01T00:00:00.000Z"
    assert rfc3339(-1) == "1969-12-31T23:59:59.999Z"
