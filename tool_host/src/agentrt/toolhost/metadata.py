"""The call metadata of the tool host contract (R3.3): its names, the builder the runtime sends, the
parser the host reads it with.

One module for both ends, so the runtime's router and the host cannot drift apart::

    pairs = call_metadata_pairs(idempotency_key="k", run_id="r", call_id="c", attempt=1, fencing_token=7)
    meta = parse_call_metadata(pairs)      # the host's view of the same call

The parser refuses what a caller may send wrong with a typed error naming the header (and quoting
at most 40 characters of it); the host answers those INVALID_ARGUMENT with a BadRequest::

    MetadataError                 header, why, reason (the host's ErrorInfo reason)
    ├── MissingIdempotencyKey     MISSING_IDEMPOTENCY_KEY: no key, or only blanks
    ├── MalformedInteger          INVALID_METADATA: attempt, fencing token or result maximum not an
    │                             integer in 0..2**63-1 (checked before it is converted)
    └── MalformedField            INVALID_FIELD: a key or id too long or not visible ASCII

The call grant (``x-agentrt-call-grant``) is read here but checked by the host's gate; the tenant
never travels as a header (only inside the grant).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import ClassVar

from agentrt.toolhost._grants import GRANT_HEADER, MAX_FENCING_TOKEN
from agentrt.toolhost._validate import bad_key

__all__ = [
    "ATTEMPT",
    "CALL_ID",
    "FENCING_TOKEN",
    "GRANT_HEADER",
    "IDEMPOTENCY_KEY",
    "INTENT_OVERRIDE",
    "MAX_CALL_ID_BYTES",
    "MAX_FENCING_TOKEN",
    "MAX_RESULT_BYTES",
    "RUN_ID",
    "SESSION_ID",
    "TRACEPARENT",
    "CallMetadata",
    "MalformedField",
    "MalformedInteger",
    "MetadataError",
    "MissingIdempotencyKey",
    "call_metadata_pairs",
    "parse_call_metadata",
]

IDEMPOTENCY_KEY = "x-agentrt-idempotency-key"
RUN_ID = "x-agentrt-run-id"
CALL_ID = "x-agentrt-call-id"
ATTEMPT = "x-agentrt-attempt"
FENCING_TOKEN = "x-agentrt-fencing-token"  # the run's lease generation
MAX_RESULT_BYTES = "x-agentrt-max-result-bytes"  # the caller's maximum for a result
SESSION_ID = "x-agentrt-session-id"  # the run's session: scopes session-wide intents
INTENT_OVERRIDE = "x-agentrt-intent-override"  # "1": a person approved repeating an earlier intent
TRACEPARENT = "traceparent"  # W3C trace context

# Call ids come from models: only their length is bounded (gRPC headers are printable already).
MAX_CALL_ID_BYTES = 1024
_MAX_DIGITS = len(str(MAX_FENCING_TOKEN))
_QUOTED = 40


class MetadataError(ValueError):
    """Call metadata the host refuses; the message names the header, never more than a short quote.

    Attributes:
        header: The metadata name at fault.
        why: What is wrong with it, for a BadRequest field violation.
    """

    reason: ClassVar[str] = "INVALID_METADATA"

    def __init__(self, message: str, *, header: str, why: str) -> None:
        super().__init__(message)
        self.header = header
        self.why = why


class MissingIdempotencyKey(MetadataError):
    """The call has no idempotency key: the host cannot record it once."""

    reason = "MISSING_IDEMPOTENCY_KEY"


class MalformedInteger(MetadataError):
    """An attempt, fencing token or result maximum that is not an integer in 0..2**63-1."""

    reason = "INVALID_METADATA"


class MalformedField(MetadataError):
    """A key or id over its length bound or not visible ASCII."""

    reason = "INVALID_FIELD"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CallMetadata:
    """The agentrt call metadata of one call, as the host reads it (R3.3).

    ``tenant`` is never read from a header: it is "" until the call's grant is verified, then
    the grant's tenant.
    """

    idempotency_key: str
    run_id: str = ""
    call_id: str = ""
    attempt: int = 1
    fencing_token: int | None = None
    traceparent: str | None = None
    grant: str = dataclasses.field(default="", repr=False)
    tenant: str = ""
    max_result_bytes: int | None = None
    session_id: str = ""
    intent_override: bool = False


def call_metadata_pairs(
    *,
    idempotency_key: str,
    run_id: str,
    call_id: str,
    attempt: int,
    fencing_token: int,
    max_result_bytes: int = 0,
    session_id: str = "",
    intent_override: bool = False,
    traceparent: str = "",
) -> tuple[tuple[str, str], ...]:
    """The gRPC metadata of one call, as :func:`parse_call_metadata` reads it back.

    Optional entries are sent only when set: ``max_result_bytes`` 0 leaves the host's default,
    ``intent_override`` is sent as ``"1"``. The call grant is added by whoever signs it.
    """
    pairs: tuple[tuple[str, str], ...] = (
        (IDEMPOTENCY_KEY, idempotency_key),
        (RUN_ID, run_id),
        (CALL_ID, call_id),
        (ATTEMPT, str(attempt)),
        (FENCING_TOKEN, str(fencing_token)),
    )
    if max_result_bytes:
        pairs = (*pairs, (MAX_RESULT_BYTES, str(max_result_bytes)))
    if session_id:
        pairs = (*pairs, (SESSION_ID, session_id))
    if intent_override:
        pairs = (*pairs, (INTENT_OVERRIDE, "1"))
    return (*pairs, (TRACEPARENT, traceparent)) if traceparent else pairs


def parse_call_metadata(metadata: Iterable[tuple[str, str | bytes]] | None) -> CallMetadata:
    """Read the agentrt call metadata of a call (names are matched case-insensitively).

    Args:
        metadata: The call's metadata pairs; binary (``-bin``) values are ignored.

    Returns:
        The call's metadata; an attempt of 0 or none reads as 1.

    Raises:
        MissingIdempotencyKey: No idempotency key, or only blanks.
        MalformedInteger: An attempt, fencing token or result maximum not in 0..2**63-1.
        MalformedField: A key, run id or session id over 256 bytes or not visible ASCII, or a call
            id over 1024 bytes.
    """
    values: dict[str, str] = {}
    for key, value in metadata or ():
        if isinstance(value, str):
            values[key.lower()] = value.strip()
    key = values.get(IDEMPOTENCY_KEY, "")
    if not key:
        raise MissingIdempotencyKey(
            f"metadata {IDEMPOTENCY_KEY} is required",
            header=IDEMPOTENCY_KEY,
            why="required: a key stable across retries of the call",
        )
    _check_field(key, IDEMPOTENCY_KEY)
    _check_field(values.get(RUN_ID, ""), RUN_ID)
    call_id = values.get(CALL_ID, "")
    if len(call_id) > MAX_CALL_ID_BYTES:  # gRPC header values are ASCII: characters are bytes
        why = f"longer than {MAX_CALL_ID_BYTES} bytes"
        raise MalformedField(f"{CALL_ID} is {why}", header=CALL_ID, why=why)
    attempt = _non_negative_int(values, ATTEMPT)
    fencing_token = _non_negative_int(values, FENCING_TOKEN)
    max_result_bytes = _non_negative_int(values, MAX_RESULT_BYTES)
    _check_field(values.get(SESSION_ID, ""), SESSION_ID)
    return CallMetadata(
        idempotency_key=key,
        run_id=values.get(RUN_ID, ""),
        call_id=call_id,
        attempt=attempt or 1,
        fencing_token=fencing_token,
        traceparent=values.get(TRACEPARENT) or None,
        grant=values.get(GRANT_HEADER, ""),
        max_result_bytes=max_result_bytes or None,
        session_id=values.get(SESSION_ID, ""),
        intent_override=values.get(INTENT_OVERRIDE, "") == "1",
    )


def _check_field(value: str, header: str) -> None:
    why = bad_key(value)
    if why is not None:
        raise MalformedField(f"{header} is {why}", header=header, why=why)


def _non_negative_int(values: Mapping[str, str], header: str) -> int | None:
    text = values.get(header, "")
    if not text:
        return None
    # The length is checked before int(): a huge number must neither reach the ledger (SQLite
    # integers are 64-bit) nor cost a long conversion.
    if not (text.isascii() and text.isdigit()) or len(text) > _MAX_DIGITS or int(text) > MAX_FENCING_TOKEN:
        raise MalformedInteger(
            f"metadata {header} must be an integer in 0..{MAX_FENCING_TOKEN}",
            header=header,
            why=f"not an integer in 0..{MAX_FENCING_TOKEN}: {text[:_QUOTED]!r}",
        )
    return int(text)
