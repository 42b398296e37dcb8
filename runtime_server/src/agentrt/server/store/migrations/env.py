"""Alembic environment, for two callers.

- agentrt itself (``agentrt migrate``, a server with ``migrate = "auto"``) hands over a live
  connection in ``config.attributes["connection"]``, already holding the migration lock.
- ``alembic -c alembic.ini ...``: the URL comes from ``-x db_url=...``, else ``AGENTRT_DB_URL``,
  else the ini's ``sqlalchemy.url``; PostgreSQL migrates under the same advisory lock. With
  ``--sql`` the statements are printed instead (offline mode).
"""

from __future__ import annotations

import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from agentrt.server.store._db import pin_driver
from agentrt.server.store._migrations import lock_migrations
from agentrt.server.store._schema import metadata


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("db_url") or os.environ.get("AGENTRT_DB_URL")
    url = url or context.config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("alembic: no database URL; pass -x db_url=URL or set AGENTRT_DB_URL")
    return pin_driver(url)


def _run() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    if context.config.config_file_name is not None:
        fileConfig(context.config.config_file_name, disable_existing_loggers=False)
    if context.is_offline_mode():
        context.configure(url=_url(), target_metadata=metadata, render_as_batch=True, literal_binds=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(_url(), poolclass=NullPool)
    try:
        # One transaction around the lock and the migrations: the lock lasts until they commit.
        with engine.begin() as conn:
            lock_migrations(conn)
            context.configure(connection=conn, target_metadata=metadata, render_as_batch=True)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


_run()
