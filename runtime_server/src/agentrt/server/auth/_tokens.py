"""Static bearer tokens from a TOML file that holds only their SHA-256 hashes.

The file (``[auth] tokens_file``)::

    [[tokens]]
    sha256 = "<hex sha256 of the UTF-8 token>"   # `agentrt auth hash-token` prints it
    subject = "alice"
    tenant = "acme"
    roles = ["approver"]

It is re-read when it changes (checked at most once a second), so tokens are added and revoked
without a restart; a rewrite that does not validate keeps the previous table and logs a warning.
"""

from __future__ import annotations

import hashlib
import time
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from agentrt.server.auth._principal import Principal
from agentrt.server.auth._reloading import ReloadingFile
from agentrt.server.config import Role
from agentrt.server.core import NotAuthenticated

__all__ = ["StaticTokens", "hash_token", "parse_tokens"]


def hash_token(token: str) -> str:
    """The hex SHA-256 of a token's UTF-8 bytes: what a tokens file stores instead of the token."""
    return hashlib.sha256(token.encode()).hexdigest()


def _printable(value: str) -> str:
    if not value.isprintable() or value != value.strip():
        raise ValueError("must be printable, without leading or trailing spaces")
    return value


_Name = Annotated[str, Field(min_length=1, max_length=128), AfterValidator(_printable)]


class _Token(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    sha256: str = Field(pattern=r"^[0-9a-fA-F]{64}$")
    subject: _Name
    tenant: _Name
    roles: list[Role] = Field(min_length=1)


class _TokensFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens: list[_Token] = Field(default_factory=list)


def _describe(error: ValidationError) -> str:
    # Pydantic's own text echoes the offending input, which may be a token pasted by mistake.
    parts = []
    for item in error.errors(include_input=False, include_url=False):
        loc = list(item["loc"])
        where = (
            f"entry {loc[1] + 1}" + (f" field {'.'.join(str(p) for p in loc[2:])}" if loc[2:] else "")
            if len(loc) >= 2 and loc[0] == "tokens" and isinstance(loc[1], int)
            else ".".join(str(p) for p in loc) or "file"
        )
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


def parse_tokens(data: bytes) -> Mapping[str, Principal]:
    """Validate a tokens file and return its principals by lower-case token hash.

    Raises:
        ValueError: Not TOML, an invalid entry (named by its 1-based position), or a hash that
            appears twice. The message never holds a hash or a token.
    """
    try:
        raw = tomllib.loads(data.decode())
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"not valid TOML ({exc})") from None
    try:
        parsed = _TokensFile.model_validate(raw)
    except ValidationError as exc:
        raise ValueError(_describe(exc)) from None
    table: dict[str, Principal] = {}
    for number, entry in enumerate(parsed.tokens, start=1):
        digest = entry.sha256.lower()
        if digest in table:
            first = next(i for i, e in enumerate(parsed.tokens, start=1) if e.sha256.lower() == digest)
            raise ValueError(f"entry {number}: the same token hash as entry {first}")
        table[digest] = Principal(
            subject=entry.subject, tenant=entry.tenant, roles=frozenset(entry.roles), authenticated_by="token"
        )
    return table


class StaticTokens:
    """Recognises the bearer tokens of a tokens file.

    A lookup is one SHA-256 of the presented token and one dict lookup (plus a ``stat`` of the
    file at most once a check interval); the table holds ready-made principals, so nothing
    else runs per call.

    Args:
        path: The tokens file.
        check_interval_s: Least time between two checks of the file for changes.
        clock: Monotonic clock, seconds.

    Raises:
        ValueError: The file cannot be read or does not validate (the message names the file
            and the entry, never a token).
    """

    name = "token"

    def __init__(
        self, *, path: str | Path, check_interval_s: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._file = ReloadingFile(
            path=path, parse=parse_tokens, what="tokens file", check_interval_s=check_interval_s, clock=clock
        )

    def authenticate_token(self, token: str) -> Principal:
        """The principal of a presented token.

        Raises:
            NotAuthenticated: ``TOKEN_UNKNOWN``: the token is not in the file (or was revoked).
        """
        principal = self._file.value.get(hash_token(token))
        if principal is None:
            raise NotAuthenticated("the bearer token is not known to this server", reason="TOKEN_UNKNOWN")
        return principal
