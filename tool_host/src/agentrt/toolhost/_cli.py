"""``python -m agentrt.toolhost`` / ``agentrt toolhost``: run a tool host process."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import importlib
import logging
import math
import os
import signal
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentrt.toolhost._cipher import CipherError, PayloadCipher
from agentrt.toolhost._config import ToolHostConfig
from agentrt.toolhost._context import DEFAULT_DATA_DIR
from agentrt.toolhost._errors import PluginError
from agentrt.toolhost._grants import DEFAULT_MAX_GRANT_LIFETIME_S, GrantVerifier
from agentrt.toolhost._host import DRAIN_LINGER_S, ToolHost, parse_listen
from agentrt.toolhost._host_metrics import start_host_metrics
from agentrt.toolhost._ledger_pg_config import (
    DEFAULT_LEDGER_SCHEMA,
    DEFAULT_OWNER_TTL_S,
    LEDGER_URL_ENV,
    PgLedgerOptions,
)
from agentrt.toolhost._ledger_retention import DEFAULT_INTERVAL_S, DEFAULT_KEEP_S, MIN_KEEP_S, LedgerRetention
from agentrt.toolhost._ledger_schema import LedgerVersionError
from agentrt.toolhost._ledger_types import LedgerUnavailable
from agentrt.toolhost._logging import configure_logging, parse_level_spec, resolve_format
from agentrt.toolhost._loop import EVENT_LOOP_CHOICES, EventLoopError, resolve_loop, run_on
from agentrt.toolhost._plugins import ENTRYPOINT_GROUP, collect_tools, get_plugin_manager
from agentrt.toolhost._tls import ReloadingServerCredentials, TlsFileError, is_loopback_host
from agentrt.toolhost.telemetry import MetricsConfigError, check_listen, read_token_file
from agentrt.toolhost.tracing import TracingError, install_tracing, options_from_env, shutdown_tracing

__all__ = ["LISTENING_PREFIX", "METRICS_PREFIX", "main"]

LISTENING_PREFIX = "agentrt-toolhost listening on "
"""Parents wait for the one stdout line ``agentrt-toolhost listening on HOST:PORT``."""
METRICS_PREFIX = "agentrt-toolhost metrics on "
"""With ``--metrics-listen``, printed before the listening line: where ``/metrics`` is served."""

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

EVENT_LOOP_ENV = "AGENTRT_TOOLHOST_EVENT_LOOP"
UVLOOP_EXTRA = "agentrt-toolhost[uvloop]"

_log = logging.getLogger("agentrt.toolhost")

#: Loaded when the --config file has [mcp_servers] tables (distribution agentrt-toolhost-mcp).
MCP_PLUGIN = "agentrt.toolhost.mcp"
#: The top-level tables a --config file may have.
CONFIG_TABLES = ("mcp", "mcp_servers")


def read_config_file(path: Path) -> dict[str, Any]:
    """Parse the ``--config`` TOML file; only the known tables are allowed.

    Raises:
        ValueError: unreadable, not TOML, or with an unknown top-level key.
    """
    try:
        with path.open("rb") as handle:
            parsed = tomllib.load(handle)
    except OSError as exc:
        raise ValueError(f"--config {path}: cannot read it: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"--config {path}: not valid TOML: {exc}") from None
    unknown = sorted(set(parsed) - set(CONFIG_TABLES))
    if unknown:
        raise ValueError(f"--config {path}: unknown key(s) {unknown}; known: {list(CONFIG_TABLES)}")
    return parsed


def _invoked_as() -> str:
    # `python -m agentrt.toolhost` runs __main__.py; the console script is `agentrt-toolhost`.
    script = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return "python -m agentrt.toolhost" if script in ("", "__main__.py", "-m") else script


def _parser(prog: str = "agentrt toolhost") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Serve agentrt plugin tools over gRPC (agentrt.toolhost.v1).",
    )
    parser.add_argument(
        "--listen", default="127.0.0.1:0", metavar="HOST:PORT", help="port 0 picks a free port"
    )
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE_OR_FILE",
        help="load a plugin module or .py file (repeatable)",
    )
    parser.add_argument(
        "--no-entrypoints", action="store_true", help="do not load the 'agentrt.tools' entry-point plugins"
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help="ledger and plugin data (default: %(default)s)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="options",
        help="plugin option (repeatable)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="TOML file handed to plugins; its [mcp_servers.<id>] tables serve MCP servers' tools "
        "(needs agentrt-toolhost-mcp)",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=5.0,
        help="SIGTERM: seconds in-flight calls get to finish while new ones are refused (UNAVAILABLE)",
    )
    parser.add_argument(
        "--cancel-grace", type=float, default=2.0, help="seconds a cancelled tool gets to stop"
    )
    parser.add_argument(
        "--ledger-keep-s",
        type=float,
        default=DEFAULT_KEEP_S,
        metavar="SECONDS",
        help="prune settled ledger entries this long after their last update (default: 30 days; at "
        f"least {MIN_KEEP_S:.0f}, see the README's retention section; inf keeps them all)",
    )
    parser.add_argument(
        "--ledger-prune-interval-s",
        type=float,
        default=DEFAULT_INTERVAL_S,
        metavar="SECONDS",
        help="seconds between ledger pruning passes",
    )
    pool = parser.add_argument_group(
        "shared ledger",
        "Hosts of a pool that serve the same write tools share one ledger in PostgreSQL (needs the "
        "postgres extra); without a URL the ledger is a SQLite file in --data-dir.",
    )
    pool.add_argument(
        "--ledger-url",
        default=os.environ.get(LEDGER_URL_ENV, ""),
        metavar="URL",
        help=f"postgresql://USER@HOST[:PORT]/DB of the pool's ledger (default: ${LEDGER_URL_ENV}); "
        "keep the password in PGPASSWORD or PGPASSFILE rather than the URL",
    )
    pool.add_argument(
        "--ledger-schema",
        default=DEFAULT_LEDGER_SCHEMA,
        metavar="NAME",
        help="PostgreSQL schema of the pool's ledger, created if missing (default: %(default)s)",
    )
    pool.add_argument(
        "--ledger-owner-ttl-s",
        type=float,
        default=DEFAULT_OWNER_TTL_S,
        metavar="SECONDS",
        help="a host whose heartbeat is older than this counts as dead: another host settles the "
        "writes it left running (default: %(default)s)",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        metavar="LEVEL",
        help="a level (DEBUG, INFO, WARNING, ERROR), logger=LEVEL pairs (agentrt.toolhost=DEBUG,grpc=ERROR) "
        "or both (default: %(default)s)",
    )
    parser.add_argument(
        "--log-format",
        choices=["json", "text"],
        help="stderr log lines as JSON or text (default: AGENTRT_LOG_FORMAT, else text)",
    )
    parser.add_argument(
        "--event-loop",
        default=os.environ.get(EVENT_LOOP_ENV, "auto"),
        metavar="|".join(EVENT_LOOP_CHOICES),
        help=f"auto: uvloop when installed ({UVLOOP_EXTRA}), else asyncio (default: ${EVENT_LOOP_ENV}, "
        "else auto)",
    )
    parser.add_argument(
        "--metrics-listen",
        default="",
        metavar="HOST:PORT",
        help="serve Prometheus /metrics there (off by default; port 0 picks one; needs the otel extra)",
    )
    parser.add_argument(
        "--metrics-token-file",
        default="",
        metavar="FILE",
        help="bearer token /metrics requires (needed for a non-loopback --metrics-listen)",
    )
    security = parser.add_argument_group(
        "security",
        "Off loopback the host needs mTLS and call grants (or --insecure). Files are re-read when they "
        "change, so certificates and grant keys rotate without a restart.",
    )
    security.add_argument("--tls-cert", default="", metavar="FILE", help="PEM certificate chain to serve")
    security.add_argument("--tls-key", default="", metavar="FILE", help="its PEM private key")
    security.add_argument(
        "--client-ca",
        default="",
        metavar="FILE",
        help="PEM CA that every client (the runtime) must present a certificate from; "
        "give --tls-cert, --tls-key and --client-ca together",
    )
    security.add_argument(
        "--grant-keys",
        default="",
        metavar="FILE",
        help="PEM Ed25519 public keys whose call grants the host obeys; without it unsigned calls "
        "are obeyed (development on loopback)",
    )
    security.add_argument(
        "--grant-leeway",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="clock skew allowed on grant expiry",
    )
    security.add_argument(
        "--grant-max-lifetime",
        type=float,
        default=DEFAULT_MAX_GRANT_LIFETIME_S,
        metavar="SECONDS",
        help="refuse grants that live (exp - iat) longer than this (default: %(default)g, the longest "
        "the runtime's grants.ttl_s may be); a grant is checked when a call arrives, so tools may run longer",
    )
    security.add_argument(
        "--encryption-key-file",
        default="",
        metavar="FILE",
        help='encrypt stored results: JSON {"active": ID, "keys": {ID: BASE64 of 32 bytes}}',
    )
    security.add_argument(
        "--insecure",
        action="store_true",
        help="allow a non-loopback --listen without mTLS and call grants (logged loudly; not for production)",
    )
    return parser


def _logs(log_format: str | None, log_level: str) -> None:
    """Log lines on stderr: ``--log-format``, else ``AGENTRT_LOG_FORMAT``, else text.

    Raises:
        ValueError: an unknown format or level.
    """
    root, levels = parse_level_spec(log_level)
    configure_logging(log_format=resolve_format(log_format), level=root or "INFO", levels=levels)


def _usage_error(message: str) -> int:
    print(f"agentrt-toolhost: error: {message}", file=sys.stderr)
    return EXIT_USAGE


class _SecurityError(Exception):
    """The security flags are incomplete, refer to unusable files, or leave a public port open."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Security:
    credentials: ReloadingServerCredentials | None
    verifier: GrantVerifier | None
    cipher: PayloadCipher | None


def _security(args: argparse.Namespace) -> _Security:
    """Build TLS credentials, the grant verifier and the cipher; refuse an open public port.

    Raises:
        _SecurityError: A flag is missing or a file unusable, or a non-loopback --listen lacks
            mTLS or grant keys and --insecure was not given.
    """
    tls_files = (args.tls_cert, args.tls_key, args.client_ca)
    if any(tls_files) and not all(tls_files):
        raise _SecurityError("give --tls-cert, --tls-key and --client-ca together (mTLS), or none of them")
    if not args.grant_leeway >= 0:
        raise _SecurityError("--grant-leeway must not be negative")
    if not 0 < args.grant_max_lifetime < math.inf:
        raise _SecurityError("--grant-max-lifetime must be a positive number of seconds")
    host, _ = parse_listen(args.listen)
    secured = all(tls_files) and bool(args.grant_keys)
    if not secured and not is_loopback_host(host):
        missing = " and ".join(
            name for name, on in (("mTLS", all(tls_files)), ("call grants", bool(args.grant_keys))) if not on
        )
        if not args.insecure:
            raise _SecurityError(
                f"refusing to listen on {args.listen} without {missing}: give --tls-cert, --tls-key, "
                "--client-ca and --grant-keys, listen on loopback, or pass --insecure"
            )
        _log.warning(
            "INSECURE (--insecure): serving %s without %s; anyone who reaches this port can run tools",
            args.listen,
            missing,
        )
    try:
        credentials = (
            ReloadingServerCredentials(
                cert_file=args.tls_cert, key_file=args.tls_key, client_ca_file=args.client_ca
            )
            if all(tls_files)
            else None
        )
    except TlsFileError as exc:
        raise _SecurityError(str(exc)) from None
    verifier = None
    if args.grant_keys:
        try:
            verifier = GrantVerifier(
                keys_file=args.grant_keys, leeway_s=args.grant_leeway, max_lifetime_s=args.grant_max_lifetime
            )
        except OSError as exc:
            raise _SecurityError(f"cannot read --grant-keys {args.grant_keys}: {exc.strerror}") from None
        except ValueError as exc:
            raise _SecurityError(f"--grant-keys {args.grant_keys}: {exc}") from None
    else:
        _log.warning(
            'no --grant-keys: calls are obeyed without a call grant, all as tenant ""; '
            "for development on loopback only"
        )
    cipher = None
    if args.encryption_key_file:
        try:
            cipher = PayloadCipher.from_file(args.encryption_key_file)
        except CipherError as exc:
            raise _SecurityError(f"--encryption-key-file: {exc}") from None
    return _Security(credentials=credentials, verifier=verifier, cipher=cipher)


def main(argv: Sequence[str] | None = None, *, prog: str | None = None) -> int:
    """Run a tool host until SIGTERM or SIGINT.

    Prints exactly one stdout line, ``agentrt-toolhost listening on HOST:PORT``
    (the real port), once it serves; with ``--metrics-listen``, ``agentrt-toolhost metrics on
    HOST:PORT`` comes just before it. Logs go to stderr.

    Args:
        argv: Arguments without the program name; ``sys.argv[1:]`` when None.
        prog: The name help and errors use (``agentrt toolhost`` from the agentrt CLI); None:
            as invoked, ``python -m agentrt.toolhost`` or the script's name.

    Returns:
        0 after a graceful shutdown, 2 for bad input (arguments, address, plugins),
        1 for an unexpected failure.
    """
    parser = _parser(prog or _invoked_as())
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse printed the message (or --help)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        _logs(args.log_format, args.log_level)
    except ValueError as exc:
        return _usage_error(str(exc))
    try:
        parse_listen(args.listen)
    except ValueError as exc:
        return _usage_error(f"invalid --listen {args.listen!r}: {exc}")
    try:
        loop_plan = resolve_loop(args.event_loop, extra=UVLOOP_EXTRA)
    except EventLoopError as exc:
        return _usage_error(f"--event-loop / ${EVENT_LOOP_ENV}: {exc}")
    options: dict[str, str] = {}
    for item in args.options:
        key, sep, value = item.partition("=")
        if not sep or not key:
            return _usage_error(f"invalid --set {item!r}: expected KEY=VALUE")
        options[key] = value
    if not (args.grace >= 0 and args.cancel_grace >= 0):
        return _usage_error("--grace and --cancel-grace must not be negative")
    try:
        retention = LedgerRetention(keep_s=args.ledger_keep_s, interval_s=args.ledger_prune_interval_s)
    except ValueError as exc:
        return _usage_error(f"--ledger-keep-s / --ledger-prune-interval-s: {exc}")
    try:
        shared_ledger = (
            PgLedgerOptions(
                url=args.ledger_url, schema=args.ledger_schema, owner_ttl_s=args.ledger_owner_ttl_s
            )
            if args.ledger_url
            else None
        )
    except ValueError as exc:
        return _usage_error(f"--ledger-url / --ledger-schema / --ledger-owner-ttl-s: {exc}")
    try:
        security = _security(args)
    except _SecurityError as exc:
        return _usage_error(str(exc))
    try:
        file = read_config_file(args.config) if args.config is not None else {}
    except ValueError as exc:
        return _usage_error(str(exc))
    plugins = list(args.plugin)
    if file.get("mcp_servers"):
        try:
            importlib.import_module(MCP_PLUGIN)
        except ImportError:
            return _usage_error(
                f"{args.config}: [mcp_servers] needs the MCP tool source: pip install agentrt-toolhost-mcp"
            )
        plugins.append(MCP_PLUGIN)
    config = ToolHostConfig(data_dir=args.data_dir, options=options, file=file)
    try:
        pm = get_plugin_manager(plugins=plugins, entrypoints=not args.no_entrypoints)
        tools = collect_tools(pm, config)
    except PluginError as exc:
        return _usage_error(str(exc))
    if not tools:
        # Plugins are opt-in (e.g. the agentrt-demo distribution): a bare host serves nothing.
        _log.warning(
            "no plugin provides any tool: serving no tools (pass --plugin MODULE_OR_FILE, or install "
            "a distribution with entry points in the %r group)",
            ENTRYPOINT_GROUP,
        )
    host = ToolHost(
        tools=tools,
        data_dir=config.data_dir,
        pm=pm,
        cancel_grace=args.cancel_grace,
        credentials=security.credentials,
        verifier=security.verifier,
        cipher=security.cipher,
        ledger_retention=retention,
        config=config,
        shared_ledger=shared_ledger,
    )
    try:
        if args.metrics_listen:
            check_listen(args.metrics_listen, token_file=args.metrics_token_file)
        if args.metrics_token_file:
            read_token_file(args.metrics_token_file)
    except MetricsConfigError as exc:
        return _usage_error(str(exc))
    try:
        # Off unless OTEL_TRACES_EXPORTER names an exporter (agentrt.toolhost.tracing).
        provider = install_tracing(options_from_env(), default_service_name="agentrt-toolhost")
    except TracingError as exc:
        return _usage_error(str(exc))
    try:
        return run_on(
            loop_plan,
            _serve(
                host,
                listen=args.listen,
                grace=args.grace,
                metrics_listen=args.metrics_listen,
                metrics_token_file=args.metrics_token_file,
            ),
            log=_log,
        )
    except KeyboardInterrupt:  # a second Ctrl-C during shutdown
        return EXIT_ERROR
    finally:
        shutdown_tracing(provider)  # after the graceful stop: the last calls' spans are exported


async def _serve(
    host: ToolHost, *, listen: str, grace: float, metrics_listen: str = "", metrics_token_file: str = ""
) -> int:
    try:
        address = await host.start(listen)
    except (OSError, LedgerVersionError, LedgerUnavailable) as exc:
        return _usage_error(str(exc))
    try:
        metrics = start_host_metrics(host.counters, listen=metrics_listen, token_file=metrics_token_file)
    except MetricsConfigError as exc:
        await host.stop(0)
        return _usage_error(str(exc))
    if metrics is not None and metrics.server is not None:
        print(f"{METRICS_PREFIX}{metrics.server.address}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        # Only possible in the main thread; an embedding caller handles signals itself then.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    try:
        print(f"{LISTENING_PREFIX}{address}", flush=True)
        await stop.wait()
        _log.info("shutting down")
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        await host.stop(grace, linger_s=DRAIN_LINGER_S)
        if metrics is not None:
            metrics.stop()  # after the drain: the last calls are counted in the final export
    return EXIT_OK
