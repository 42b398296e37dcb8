"""Both ledger backends behind one factory, so the ledger's tests run on SQLite and PostgreSQL.

A PostgreSQL ledger gets a schema of its own per test in the run's database (``pg_database``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentrt.toolhost._cipher import PayloadCipher
from agentrt.toolhost._ledger import Ledger
from agentrt.toolhost._ledger_backend import LedgerBackend

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]

OpenLedger = Callable[..., Any]
"""``open_ledger(owner, cipher=None)``: a ledger on the test's one store, as a host life ``owner``."""


def ledger_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenLedger]:
    """Yield a factory of ledgers on one store of the backend ``request.param``; close them after."""
    opened: list[LedgerBackend] = []
    if request.param == "sqlite":
        path = tmp_path / "sub" / "ledger.sqlite"

        def open_ledger(owner: str, cipher: PayloadCipher | None = None) -> LedgerBackend:
            ledger = Ledger(path, owner=owner, cipher=cipher)
            opened.append(ledger)
            return ledger

    else:
        from agentrt.toolhost._ledger_pg import PgLedger
        from agentrt.toolhost._ledger_pg_config import PgLedgerOptions

        options = PgLedgerOptions(
            url=str(request.getfixturevalue("pg_database")), schema=f"t_{uuid.uuid4().hex[:12]}"
        )

        def open_ledger(owner: str, cipher: PayloadCipher | None = None) -> LedgerBackend:
            ledger = PgLedger(options, owner=owner, cipher=cipher, heartbeat=False)
            opened.append(ledger)
            return ledger

    yield open_ledger
    for ledger in opened:
        ledger.close()
