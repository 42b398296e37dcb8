"""``python -m tool_host`` / ``agentrt toolhost``: run a tool host process."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from tool_host._config import ToolHostConfig
from tool_host._context import DEFAULT_DATA_DIR
from tool_host._errors import PluginError
from tool_host._host import ToolHost, parse_listen
from tool_host._plugins import collect_tools, get_plugin_manager

__all__ = ["LISTENING_PREFIX", "main"]

LISTENING_PREFIX = "agentrt-toolhost listening on "
"""Parents wait for the one stdout line ``agentrt-toolhost listening on HOST:PORT``."""

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

_log = logging.getLogger("tool_host")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tool_host", description="Serve agentrt plugin tools over gRPC (agentrt.toolhost.v1)."
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
        "--no-entrypoints", action="store_true", help="do not load the 'agentrt.plugins' entry-point plugins"
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
    parser.add_argument("--grace", type=float, default=5.0, help="seconds in-flight calls get at shutdown")
    parser.add_argument(
        "--cancel-grace", type=float, default=2.0, help="seconds a cancelled tool gets to stop"
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return parser


def _usage_error(message: str) -> int:
    print(f"agentrt-toolhost: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    """Run a tool host until SIGTERM or SIGINT.

    Prints exactly one stdout line, ``agentrt-toolhost listening on HOST:PORT``
    (the real port), once it serves. Logs go to stderr.

    Args:
        argv: Arguments without the program name; ``sys.argv[1:]`` when None.

    Returns:
        0 after a graceful shutdown, 2 for bad input (arguments, address, plugins),
        1 for an unexpected failure.
    """
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse printed the message (or --help)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        parse_listen(args.listen)
    except ValueError as exc:
        return _usage_error(f"invalid --listen {args.listen!r}: {exc}")
    options: dict[str, str] = {}
    for item in args.options:
        key, sep, value = item.partition("=")
        if not sep or not key:
            return _usage_error(f"invalid --set {item!r}: expected KEY=VALUE")
        options[key] = value
    if not (args.grace >= 0 and args.cancel_grace >= 0):
        return _usage_error("--grace and --cancel-grace must not be negative")
    config = ToolHostConfig(data_dir=args.data_dir, options=options)
    try:
        pm = get_plugin_manager(plugins=args.plugin, entrypoints=not args.no_entrypoints)
        tools = collect_tools(pm, config)
    except PluginError as exc:
        return _usage_error(str(exc))
    if not tools:
        _log.warning("no plugin provides any tool")
    host = ToolHost(tools=tools, data_dir=config.data_dir, pm=pm, cancel_grace=args.cancel_grace)
    try:
        return asyncio.run(_serve(host, listen=args.listen, grace=args.grace))
    except KeyboardInterrupt:  # a second Ctrl-C during shutdown
        return EXIT_ERROR


async def _serve(host: ToolHost, *, listen: str, grace: float) -> int:
    try:
        address = await host.start(listen)
    except OSError as exc:
        return _usage_error(str(exc))
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
        await host.stop(grace)
    return EXIT_OK
