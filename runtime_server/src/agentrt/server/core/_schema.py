"""Where a database's schema stands against the migrations this code ships, and what an operator
should do about it. Pure: the store reads the revisions, this decides.

    EMPTY    no revision recorded: a new database (``agentrt migrate upgrade`` creates it)
    BEHIND   an older revision this code knows: upgrade
    AT_HEAD  the newest revision: nothing to do
    UNKNOWN  a revision this code does not know: a newer agentrt migrated it (or another tool)
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["UPGRADE_COMMAND", "SchemaState", "SchemaVerdict", "schema_verdict"]

UPGRADE_COMMAND = "agentrt migrate upgrade"


class SchemaState(StrEnum):
    """How a database's recorded revisions compare with the shipped migrations."""

    EMPTY = "empty"
    BEHIND = "behind"
    AT_HEAD = "at_head"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaVerdict:
    """The state, the revisions it was decided from, and a one-line explanation.

    Attributes:
        state: Where the schema stands.
        current: Revisions recorded in the database (empty for a new one).
        heads: The newest revisions the shipped migrations know.
    """

    state: SchemaState
    current: tuple[str, ...]
    heads: tuple[str, ...]

    @property
    def at_head(self) -> bool:
        return self.state is SchemaState.AT_HEAD

    def message(self) -> str:
        """One line for an operator: where the schema is and the command that fixes it."""
        head = ", ".join(self.heads) or "none"
        current = ", ".join(self.current)
        match self.state:
            case SchemaState.AT_HEAD:
                return f"database schema is at head revision {head}"
            case SchemaState.EMPTY:
                return f"database has no agentrt schema yet (head is {head}); run `{UPGRADE_COMMAND}`"
            case SchemaState.BEHIND:
                return (
                    f"database schema is at revision {current}, behind head {head}; run `{UPGRADE_COMMAND}`"
                )
            case SchemaState.UNKNOWN:
                return (
                    f"database schema is at revision {current}, which this agentrt does not know "
                    f"(its head is {head}): a newer agentrt migrated it; run that version, or its "
                    f"`agentrt migrate downgrade {head}`"
                )
            case _:
                raise AssertionError(f"unhandled schema state {self.state!r}")


def schema_verdict(*, current: Sequence[str], heads: Sequence[str], known: Collection[str]) -> SchemaVerdict:
    """Decide where a schema stands.

    Args:
        current: The revisions the database records (Alembic's version table).
        heads: The head revisions of the shipped migrations.
        known: Every revision the shipped migrations contain.

    Returns:
        The verdict; an unknown revision wins over everything else, since no upgrade fixes it.
    """
    current_t, heads_t = tuple(sorted(current)), tuple(sorted(heads))
    if not current_t:
        state = SchemaState.EMPTY
    elif any(rev not in known for rev in current_t):
        state = SchemaState.UNKNOWN
    elif set(current_t) == set(heads_t):
        state = SchemaState.AT_HEAD
    else:
        state = SchemaState.BEHIND
    return SchemaVerdict(state=state, current=current_t, heads=heads_t)
