"""One contract for the call metadata (R3.3): what the runtime's router sends is what the host reads.

The runtime builds its pairs with :func:`agentrt.toolhost.metadata.call_metadata_pairs` (through
``CallMetadata.pairs``), the host reads them with :func:`parse_call_metadata`; hostile values get a
typed error naming the header, which the host's servicer answers INVALID_ARGUMENT with a BadRequest.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrt.server.tools import CallMetadata as SentMetadata
from agentrt.toolhost._server import parse_metadata
from agentrt.toolhost._status import InvalidRequest
from agentrt.toolhost.metadata import (
    ATTEMPT,
    CALL_ID,
    FENCING_TOKEN,
    GRANT_HEADER,
    IDEMPOTENCY_KEY,
    MAX_CALL_ID_BYTES,
    MAX_RESULT_BYTES,
    RUN_ID,
    SESSION_ID,
    CallMetadata,
    MalformedField,
    MalformedInteger,
    MetadataError,
    MissingIdempotencyKey,
    call_metadata_pairs,
    parse_call_metadata,
)
from agentrt.toolhost.security import MAX_FENCING_TOKEN

_KEYS = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=256)
_IDS = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=256)
_TOKENS = st.integers(min_value=0, max_value=MAX_FENCING_TOKEN)


@given(
    key=_KEYS,
    run_id=_IDS,
    call_id=_IDS,
    attempt=st.integers(min_value=1, max_value=10**6),
    fencing_token=_TOKENS,
    max_result_bytes=st.integers(min_value=0, max_value=2**40),
    session_id=_IDS,
    intent_override=st.booleans(),
    traced=st.booleans(),
)
def test_what_the_runtime_sends_is_what_the_host_reads(
    key: str,
    run_id: str,
    call_id: str,
    attempt: int,
    fencing_token: int,
    max_result_bytes: int,
    session_id: str,
    intent_override: bool,
    traced: bool,
) -> None:
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" if traced else ""
    sent = SentMetadata(
        idempotency_key=key,
        run_id=run_id,
        call_id=call_id,
        attempt=attempt,
        fencing_token=fencing_token,
        tenant_id="acme",  # only ever inside a grant
        traceparent=traceparent,
        max_result_bytes=max_result_bytes,
        session_id=session_id,
        intent_override=intent_override,
    )

    read = parse_call_metadata(sent.pairs())

    assert read == CallMetadata(
        idempotency_key=key,
        run_id=run_id,
        call_id=call_id,
        attempt=attempt,
        fencing_token=fencing_token,
        traceparent=traceparent or None,
        max_result_bytes=max_result_bytes or None,
        session_id=session_id,
        intent_override=intent_override,
    )
    assert not [name for name, _ in sent.pairs() if "tenant" in name]  # the tenant travels in the grant


def test_the_router_builds_its_pairs_with_the_shared_builder() -> None:
    sent = SentMetadata(idempotency_key="k", run_id="r", call_id="c", attempt=2, fencing_token=3)
    assert sent.pairs() == call_metadata_pairs(
        idempotency_key="k", run_id="r", call_id="c", attempt=2, fencing_token=3
    )
    assert dict(sent.pairs()) == {
        IDEMPOTENCY_KEY: "k",
        RUN_ID: "r",
        CALL_ID: "c",
        ATTEMPT: "2",
        FENCING_TOKEN: "3",
    }


def test_names_are_matched_case_insensitively_and_binary_values_ignored() -> None:
    read = parse_call_metadata(
        [("X-AgentRT-Idempotency-Key", " k "), ("x-agentrt-attempt", b"7"), (GRANT_HEADER, "g.r.ant")]
    )
    assert (read.idempotency_key, read.attempt, read.grant) == ("k", 1, "g.r.ant")
    assert "g.r.ant" not in repr(read)


@pytest.mark.parametrize("metadata", [None, [], [(IDEMPOTENCY_KEY, "   ")], [(RUN_ID, "r")]])
def test_a_missing_idempotency_key_is_a_typed_error(metadata: list[tuple[str, str]] | None) -> None:
    with pytest.raises(MissingIdempotencyKey) as caught:
        parse_call_metadata(metadata)
    assert (caught.value.header, caught.value.reason) == (IDEMPOTENCY_KEY, "MISSING_IDEMPOTENCY_KEY")


@pytest.mark.parametrize("header", [ATTEMPT, FENCING_TOKEN, MAX_RESULT_BYTES])
@pytest.mark.parametrize(
    "value", ["two", "-1", "1e3", "0x10", "\u0661", str(MAX_FENCING_TOKEN + 1), "9" * 5000, "3.0"]
)
def test_a_non_numeric_or_out_of_range_integer_is_a_typed_error(header: str, value: str) -> None:
    with pytest.raises(MalformedInteger) as caught:
        parse_call_metadata([(IDEMPOTENCY_KEY, "k"), (header, value)])
    assert (caught.value.header, caught.value.reason) == (header, "INVALID_METADATA")
    # The message and the violation quote at most a short piece of what was sent.
    assert len(str(caught.value)) < 200 and len(caught.value.why) < 200


@pytest.mark.parametrize(
    ("metadata", "header"),
    [
        ([(IDEMPOTENCY_KEY, "k" * 257)], IDEMPOTENCY_KEY),
        ([(IDEMPOTENCY_KEY, "has space")], IDEMPOTENCY_KEY),
        ([(IDEMPOTENCY_KEY, "k"), (RUN_ID, "r" * 5000)], RUN_ID),
        ([(IDEMPOTENCY_KEY, "k"), (SESSION_ID, "s\tt")], SESSION_ID),
        ([(IDEMPOTENCY_KEY, "k"), (CALL_ID, "c" * (MAX_CALL_ID_BYTES + 1))], CALL_ID),
    ],
)
def test_an_oversized_or_invisible_field_is_a_typed_error(
    metadata: list[tuple[str, str]], header: str
) -> None:
    with pytest.raises(MalformedField) as caught:
        parse_call_metadata(metadata)
    assert (caught.value.header, caught.value.reason) == (header, "INVALID_FIELD")
    assert "k" * 100 not in str(caught.value) and "r" * 100 not in str(caught.value)


def test_the_largest_values_are_accepted() -> None:
    read = parse_call_metadata(
        [
            (IDEMPOTENCY_KEY, "k" * 256),
            (CALL_ID, "c" * MAX_CALL_ID_BYTES),
            (FENCING_TOKEN, str(MAX_FENCING_TOKEN)),
            (ATTEMPT, str(MAX_FENCING_TOKEN)),
        ]
    )
    assert (read.fencing_token, read.attempt, len(read.call_id)) == (
        MAX_FENCING_TOKEN,
        MAX_FENCING_TOKEN,
        MAX_CALL_ID_BYTES,
    )


@pytest.mark.parametrize(
    ("metadata", "error"),
    [
        ([], MissingIdempotencyKey),
        ([(IDEMPOTENCY_KEY, "k"), (ATTEMPT, "second")], MalformedInteger),
        ([(IDEMPOTENCY_KEY, "k" * 300)], MalformedField),
    ],
)
def test_the_host_refuses_each_typed_error_with_its_reason_and_header(
    metadata: list[tuple[str, str]], error: type[MetadataError]
) -> None:
    with pytest.raises(error) as typed:
        parse_call_metadata(metadata)
    with pytest.raises(InvalidRequest) as refused:
        parse_metadata(metadata)
    assert refused.value.reason == typed.value.reason
    assert refused.value.violations == [(typed.value.header, typed.value.why)]
