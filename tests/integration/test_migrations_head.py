"""A schema already at head is checked with one SELECT: Alembic is never loaded for it.

Alembic, Mako and Pygments are ~12 MB of a runtime's memory for good once imported; a runtime
started after ``agentrt migrate upgrade`` (deploy/), or restarted, has no use for them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agentrt.server.core import SchemaState
from agentrt.server.store._migrations import (
    HEAD_REVISION,
    downgrade_schema,
    read_schema_verdict,
    shipped_revisions,
    upgrade_schema,
)

_PROBE = """
import sys
from agentrt.server.store import open_database
db = open_database(sys.argv[1], migrate=sys.argv[2])
print("alembic" in sys.modules, "psycopg" in sys.modules)
"""


def _opens_loading(url: str, migrate: str) -> tuple[bool, bool]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, url, migrate], capture_output=True, text=True, timeout=60, check=True
    )
    alembic, psycopg = done.stdout.split()
    return alembic == "True", psycopg == "True"


def test_the_head_constant_is_the_scripts_head() -> None:
    heads = [r.revision for r in shipped_revisions() if r.is_head]
    assert heads == [HEAD_REVISION], "a migration was added: move HEAD_REVISION to it"


def test_a_schema_at_head_opens_without_alembic_and_an_empty_one_is_migrated(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    assert _opens_loading(url, "auto") == (True, False)  # empty: Alembic creates the schema
    assert read_schema_verdict(url).state is SchemaState.AT_HEAD
    assert _opens_loading(url, "auto") == (False, False)
    assert _opens_loading(url, "check") == (False, False)


def test_a_schema_behind_head_still_gets_alembic(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade_schema(url)
    older = [r.revision for r in shipped_revisions()][-2]
    downgrade_schema(url, older)
    verdict = read_schema_verdict(url)
    assert verdict.state is SchemaState.BEHIND and verdict.current == (older,)
    before, after = upgrade_schema(url)
    assert before.state is SchemaState.BEHIND and after.state is SchemaState.AT_HEAD
    again = upgrade_schema(url)  # at head: nothing to do, the same verdict twice
    assert again[0] == again[1] and again[1].state is SchemaState.AT_HEAD
