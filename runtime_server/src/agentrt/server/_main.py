"""``agentrt serve`` / ``python -m agentrt.server``: parse flags, load config, serve."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from agentrt.server import _demo
from agentrt.server.config import ConfigError, LoggingConfig, Settings, load_settings
from agentrt.server.telemetry import setup_logging
from agentrt.toolhost._loop import EventLoopError, resolve_loop, run_on

UVLOOP_EXTRA = "agentrt-server[uvloop]"

_log = logging.getLogger("agentrt.server")


def _parser(prog: str = "agentrt serve") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Run the agentrt runtime server.")
    parser.add_argument("--config", help="TOML config file (AGENTRT_* env vars override it)")
    parser.add_argument("--listen", help="HOST:PORT to serve gRPC on (port 0 picks a free one)")
    parser.add_argument("--db-url", help="sqlite:///PATH or postgresql://USER@HOST/DB")
    parser.add_argument(
        "--demo",
        action="store_true",
        help="embedded demo defaults: SQLite, a local tool host, the refund-demo agent",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="allow a non-loopback listen without TLS and authentication (logged loudly; not for production)",
    )
    parser.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        help="serve Prometheus /metrics there ([metrics] listen; port 0 picks a free one)",
    )
    parser.add_argument(
        "--http-listen",
        metavar="HOST:PORT",
        help="also serve the API as HTTP/JSON (Connect) and SSE there (http_listen; port 0 picks a free one)",
    )
    parser.add_argument(
        "--log-level",
        help="a level (WARNING), logger=LEVEL pairs (agentrt.run=INFO,grpc=ERROR) or both; "
        "on top of [logging] level and levels",
    )
    parser.add_argument(
        "--log-format",
        choices=["json", "text"],
        help="stderr log lines as JSON or text (default: AGENTRT_LOG_FORMAT, else [logging] format)",
    )
    return parser


def build_settings(args: argparse.Namespace) -> Settings:
    """Config file + env, then command-line flags on top.

    Raises:
        ConfigError: the result does not validate.
    """
    settings = load_settings(args.config, base=_demo.DEMO_SETTINGS if args.demo else None)
    overrides: dict[str, Any] = {}
    if args.listen:
        overrides["listen"] = args.listen
    if args.db_url:
        overrides["db_url"] = args.db_url
    if args.insecure:
        overrides["insecure"] = True
    if args.http_listen is not None:
        overrides["http_listen"] = args.http_listen
    if args.metrics_listen is not None:
        overrides["metrics"] = {**settings.metrics.model_dump(), "listen": args.metrics_listen}
    if not overrides:
        return settings
    try:
        return Settings.model_validate({**settings.model_dump(), **overrides})
    except ValueError as exc:
        raise ConfigError(f"invalid command-line option: {exc}") from exc


def main(argv: list[str] | None = None, *, prog: str = "agentrt serve") -> int:
    """Entry point; returns the process exit code (2 for bad configuration); ``prog`` names it in help."""
    args = _parser(prog).parse_args(argv)
    try:
        # Until the config is read, the flags and AGENTRT_LOG_FORMAT alone decide.
        setup_logging(LoggingConfig(), log_format=args.log_format, log_level=args.log_level)
    except ValueError as exc:
        print(f"agentrt serve: {exc}", file=sys.stderr)
        return 2
    if args.demo and not _demo.demo_plugins_installed():
        print(f"agentrt serve: {_demo.DEMO_MISSING}", file=sys.stderr)
        return 2
    try:
        settings = build_settings(args)
        setup_logging(settings.logging, log_format=args.log_format, log_level=args.log_level)
    except (ConfigError, ValueError) as exc:
        print(f"agentrt serve: {exc}", file=sys.stderr)
        return 2
    try:
        loop_plan = resolve_loop(settings.event_loop, extra=UVLOOP_EXTRA)
    except EventLoopError as exc:
        print(f"agentrt serve: {exc}", file=sys.stderr)
        return 2
    from agentrt.server.api import serve

    try:
        # SIGHUP reads the config again (file, env, flags): tool hosts are added or removed live.
        reload_settings = lambda: build_settings(args)  # noqa: E731
        run_on(
            loop_plan,
            serve(settings, announce=lambda line: print(line, flush=True), reload_settings=reload_settings),
            log=_log,
        )
    except ConfigError as exc:
        print(f"agentrt serve: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0
