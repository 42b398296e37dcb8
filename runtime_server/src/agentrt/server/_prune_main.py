"""``agentrt prune``: prune ended runs past their tenant's retention age now, or with ``--dry-run``
say what that would delete (DESIGN R8.4). It reads the server's config and talks to the database
directly, so it also works while no server runs; beside running servers it is as safe as their
own retention job. It never migrates the schema, and refuses one not at head unless the config says
``migrate = "off"``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from agentrt.server.config import ConfigError, Settings, load_settings
from agentrt.server.engine import build_pruner
from agentrt.server.engine._faults import FaultPlan
from agentrt.server.store import (
    Database,
    PostgresDatabase,
    PruneReport,
    SqliteDatabase,
    normalise_url,
    pin_driver,
    read_schema_verdict,
)

__all__ = ["main"]

_NOT_CONFIGURED = (
    "nothing to prune: retention is not configured (set retention.ended_after_s or retention.per_tenant)"
)


def _parser(prog: str = "agentrt prune") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Delete the events, signals, checkpoints and payloads of runs that ended longer "
        "ago than their tenant's retention age; the runs stay as tombstones.",
    )
    parser.add_argument("--config", help="the server's TOML config file (AGENTRT_* env vars override it)")
    parser.add_argument(
        "--db-url", help="sqlite:///PATH or postgresql://USER@HOST/DB (default: the config's)"
    )
    parser.add_argument("--dry-run", action="store_true", help="only count what would be deleted")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    settings = load_settings(args.config)
    if args.db_url:
        try:
            settings = Settings.model_validate({**settings.model_dump(), "db_url": args.db_url})
        except ValueError as exc:
            raise ConfigError(f"invalid --db-url: {exc}") from exc
    return settings


def _database(url: str) -> Database:
    """The database at ``url``, without migrating it (a dry run writes nothing).

    Raises:
        ConfigError: The URL is unusable or names a SQLite file that does not exist.
    """
    try:
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite":
            path = parsed.database or ""
            if path != ":memory:" and not Path(path).is_file():
                raise ConfigError(f"no database file at {path}")
            return SqliteDatabase(normalise_url(url))
        return PostgresDatabase(normalise_url(url), pool_size=1)
    except ConfigError:
        raise
    except Exception as exc:  # the URL's own text may hold a password: never echo it
        raise ConfigError(f"unusable db_url ({type(exc).__name__})") from None


def _report_lines(report: PruneReport) -> list[str]:
    verb = "would delete" if report.dry_run else "deleted"
    lines = [f"{'dry run: ' if report.dry_run else ''}{verb} (per tenant):"]
    rows = [*sorted(report.tenants.items()), ("TOTAL", report.total)]
    for tenant, counts in rows:
        lines.append(
            f"  tenant={tenant} runs={counts.runs} events={counts.events} signals={counts.signals} "
            f"checkpoints={counts.checkpoints} payloads={counts.payloads} "
            f"payload_bytes={counts.payload_bytes}"
        )
    if not report.dry_run:
        lines.append(f"  payload files deleted={report.files_deleted} refused={report.files_refused}")
    return lines


def _report_json(report: PruneReport) -> dict[str, Any]:
    return {
        "dry_run": report.dry_run,
        "now_ms": report.now_ms,
        "tenants": {tenant: asdict(counts) for tenant, counts in sorted(report.tenants.items())},
        "total": asdict(report.total),
        "files_deleted": report.files_deleted,
        "files_refused": report.files_refused,
    }


async def _prune(settings: Settings, *, dry_run: bool) -> PruneReport | None:
    if settings.retention.ended_after_s is None and not settings.retention.per_tenant:
        return None  # said before the database is touched
    db = _database(settings.db_url)
    try:
        if settings.migrate != "off":  # a schema it was not written for could be pruned wrong
            verdict = read_schema_verdict(pin_driver(settings.db_url))
            if not verdict.at_head:
                raise ConfigError(verdict.message())
        pruner = build_pruner(settings, db, fault_point=FaultPlan.from_env().hit)
        if pruner is None:
            return None
        return await pruner.prune(now_ms=int(time.time() * 1000), dry_run=dry_run)
    finally:
        await db.dispose()


def main(argv: list[str] | None = None, *, prog: str = "agentrt prune") -> int:
    """Entry point; returns the exit code (2 for bad configuration or an unreadable store); ``prog``
    names it in help."""
    try:
        args = _parser(prog).parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    try:
        settings = _settings(args)
        report = asyncio.run(_prune(settings, dry_run=args.dry_run))
    except ConfigError as exc:
        print(f"agentrt prune: {exc}", file=sys.stderr)
        return 2
    except SQLAlchemyError as exc:
        print(
            f"agentrt prune: cannot prune the run store ({type(exc).__name__}); is its schema current? "
            "`agentrt migrate check` tells",
            file=sys.stderr,
        )
        return 2
    if report is None:
        print(json.dumps({"configured": False}) if args.json else _NOT_CONFIGURED)
        return 0
    if args.json:
        print(json.dumps(_report_json(report), sort_keys=True))
    else:
        print("\n".join(_report_lines(report)))
    return 0
