"""``agentrt migrate``: the run store's schema for operators (upgrade, downgrade, current, check,
history). It reads the server's config (``--config``, ``AGENTRT_*`` env, ``--db-url``) and talks
to the database directly, so it runs as a one-shot migration Job before servers that start with
``migrate = "check"``. Upgrades and downgrades of PostgreSQL hold the same advisory lock as a
server migrating at start, so they never run two at once.

Exit codes: 0 done (``check``: the schema is at head); 1 ``check`` found the schema not at head
(empty, behind, or at a revision this version does not know); 2 usage or configuration error, a
revision that cannot be reached, or a database that cannot be reached or read. Errors are one
line on stderr, ``agentrt migrate: ...``; a database URL in them has its password masked.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from agentrt.server.config import ConfigError, load_settings
from agentrt.server.store import (
    MigrationError,
    describe_database_error,
    downgrade_schema,
    normalise_url,
    pin_driver,
    read_schema_verdict,
    shipped_revisions,
    upgrade_schema,
)

__all__ = ["EXIT_ERROR", "EXIT_NOT_AT_HEAD", "EXIT_OK", "main"]

EXIT_OK = 0
EXIT_NOT_AT_HEAD = 1
EXIT_ERROR = 2


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Inspect and migrate the run store's schema (Alembic revisions shipped with agentrt).",
        epilog=f"Exit codes: {EXIT_OK} done; {EXIT_NOT_AT_HEAD} `check` found the schema not at head; "
        f"{EXIT_ERROR} bad usage or configuration, an unreachable revision or database.",
    )
    # The options go before or after the action (`agentrt migrate upgrade --config F`, as the
    # deploy/ Job runs it): each action's parser takes them too, without overwriting earlier ones.
    _add_source_options(parser, default=None)
    common = argparse.ArgumentParser(add_help=False)
    _add_source_options(common, default=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = sub.add_parser("upgrade", parents=[common], help="upgrade the schema to REV (default: head)")
    p.add_argument("revision", nargs="?", default="head", metavar="REV")
    p = sub.add_parser(
        "downgrade", parents=[common], help="downgrade the schema to REV (a revision id, -1, or base)"
    )
    p.add_argument("revision", metavar="REV")
    sub.add_parser("current", parents=[common], help="print the schema's current revision")
    sub.add_parser("check", parents=[common], help=f"exit {EXIT_NOT_AT_HEAD} unless the schema is at head")
    sub.add_parser(
        "history", parents=[common], help="list the shipped revisions, oldest first (reads no database)"
    )
    return parser


def _add_source_options(parser: argparse.ArgumentParser, *, default: str | None) -> None:
    parser.add_argument(
        "--config", default=default, help="the server's TOML config file (AGENTRT_* env vars override it)"
    )
    parser.add_argument(
        "--db-url",
        default=default,
        help="sqlite:///PATH or postgresql://USER@HOST/DB (default: the config's)",
    )


def _db_url(args: argparse.Namespace) -> str:
    url = args.db_url
    if not url:
        settings = load_settings(args.config)
        url = settings.db_url
    elif args.config:
        load_settings(args.config)  # a broken config file is reported even when --db-url wins
    try:
        return pin_driver(url)
    except ArgumentError:  # SQLAlchemy's message quotes the URL, password and all
        raise ConfigError("unusable db_url: not a database URL") from None
    except ValueError as exc:  # names the scheme only
        raise ConfigError(f"unusable db_url: {exc}") from None


def _run(action: str, revision: str, url: str, *, prog: str) -> int:
    if action == "current":
        verdict = read_schema_verdict(url)
        current = ", ".join(verdict.current) or "none"
        print(f"{current}{' (head)' if verdict.at_head else ''}")
        if not verdict.at_head:
            print(verdict.message(), file=sys.stderr)
        return EXIT_OK
    if action == "check":
        verdict = read_schema_verdict(url)
        if verdict.at_head:
            print(verdict.message())
            return EXIT_OK
        print(f"{prog}: {verdict.message()}", file=sys.stderr)
        return EXIT_NOT_AT_HEAD
    if action == "upgrade":
        before, after = upgrade_schema(normalise_url(url), revision)
    else:
        before, after = downgrade_schema(url, revision)
    was, now = ", ".join(before.current) or "none", ", ".join(after.current) or "none"
    verb = "upgraded" if action == "upgrade" else "downgraded"
    print(f"{verb} {was} -> {now}" if was != now else f"already at {now}; nothing to do")
    return EXIT_OK


def _history() -> None:
    for rev in shipped_revisions():
        print(f"{rev.revision}  {rev.doc}{'  (head)' if rev.is_head else ''}")


def main(argv: Sequence[str] | None = None, *, prog: str = "agentrt migrate") -> int:
    """Entry point.

    Args:
        argv: Arguments without the program name; ``sys.argv[1:]`` when None.
        prog: The name the help and errors use.

    Returns:
        The exit code (see the module docstring).
    """
    try:
        args = _parser(prog).parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    if args.action == "history":
        _history()
        return EXIT_OK
    url = ""
    try:
        url = _db_url(args)
        return _run(args.action, getattr(args, "revision", ""), url, prog=prog)
    except ConfigError as exc:
        problem = str(exc)
    except MigrationError as exc:
        problem = f"cannot {args.action} to {args.revision!r}: {exc}"
    except SQLAlchemyError as exc:
        problem = describe_database_error(exc, url)
    except OSError as exc:  # the directory of a SQLite file cannot be made
        problem = f"cannot make the database's directory: {exc.filename}: {exc.strerror}"
    print(f"{prog}: {problem}", file=sys.stderr)
    return EXIT_ERROR
