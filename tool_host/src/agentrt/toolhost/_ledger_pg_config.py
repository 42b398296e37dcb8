"""Where a pool's shared ledger lives: a PostgreSQL URL from the host's own configuration.

Nothing here imports the driver, so the host's command line checks a URL (and prints it with its
password masked) even where ``psycopg`` is not installed.
"""

from __future__ import annotations

import dataclasses
import math
import urllib.parse

from agentrt.toolhost._ledger_pg_schema import check_schema_name

__all__ = [
    "DEFAULT_LEDGER_SCHEMA",
    "DEFAULT_OWNER_TTL_S",
    "LEDGER_URL_ENV",
    "PgLedgerOptions",
    "redact_url",
]

LEDGER_URL_ENV = "AGENTRT_TOOLHOST_LEDGER_URL"
"""Environment variable read when ``--ledger-url`` is not given."""
DEFAULT_LEDGER_SCHEMA = "agentrt_toolhost"
DEFAULT_OWNER_TTL_S = 15.0
"""Seconds without a heartbeat after which a host counts as dead and its RUNNING calls as orphans."""
_SCHEMES = ("postgresql", "postgres")


def redact_url(url: str) -> str:
    """``url`` with its password (in the authority or a ``password=`` parameter) masked as ``***``."""
    try:
        parts = urllib.parse.urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, hostport = netloc.rpartition("@")
            user, sep, _ = userinfo.partition(":")
            netloc = f"{user}{':***' if sep else ''}@{hostport}"
        query = urllib.parse.urlencode(
            [
                (name, "***" if name.lower() == "password" else value)
                for name, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
            ],
            safe="*",
        )
        return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, ""))
    except ValueError:
        return "<unparseable URL>"


@dataclasses.dataclass(frozen=True, kw_only=True)
class PgLedgerOptions:
    """A shared PostgreSQL ledger.

    Attributes:
        url: ``postgresql://USER[:PASSWORD]@HOST[:PORT]/DB[?...]``; libpq's ``PGPASSWORD`` and
            ``PGPASSFILE`` work too, keeping the password out of the URL.
        schema: The PostgreSQL schema holding this pool's ledger (created if missing).
        owner_ttl_s: Seconds without a heartbeat after which a host counts as dead.

    Raises:
        ValueError: Not a PostgreSQL URL, a bad schema name, or a TTL that is not a positive number;
            the message never holds the password.
    """

    url: str = dataclasses.field(repr=False)
    schema: str = DEFAULT_LEDGER_SCHEMA
    owner_ttl_s: float = DEFAULT_OWNER_TTL_S

    def __post_init__(self) -> None:
        try:
            parts = urllib.parse.urlsplit(self.url)
        except ValueError:
            raise ValueError("the ledger URL is not a URL") from None
        if parts.scheme not in _SCHEMES or not parts.netloc:
            # Only the scheme is echoed: a malformed URL may hide its password where no parser finds it.
            raise ValueError(
                f"the ledger URL must be postgresql://USER@HOST[:PORT]/DB (its scheme is {parts.scheme!r})"
            )
        check_schema_name(self.schema)
        if not (math.isfinite(self.owner_ttl_s) and self.owner_ttl_s > 0):
            raise ValueError("the ledger owner TTL must be a positive number of seconds")

    @property
    def safe_url(self) -> str:
        """The URL with its password masked: what logs and errors show."""
        return redact_url(self.url)

    @property
    def secrets(self) -> tuple[str, ...]:
        """The password the URL carries, as written and percent-decoded (to scrub driver messages)."""
        try:
            parts = urllib.parse.urlsplit(self.url)
            raw = [parts.password or ""]
            raw += [
                v
                for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
                if k.lower() == "password"
            ]
        except ValueError:
            return ()
        forms = {form for value in raw for form in (value, urllib.parse.unquote(value)) if form}
        return tuple(sorted(forms, key=len, reverse=True))  # longest first: no partial leftovers
