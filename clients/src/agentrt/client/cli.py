"""The ``agentrt`` command line: start and follow runs, inspect them, run the servers and the demo.

Connection options (``--target``, ``--ca``, ``--cert``, ``--key``, ``--token``, ``--token-file``,
``--server-name``, ``--tls``) go before or after the command and fall back to ``AGENTRT_TARGET``,
``AGENTRT_CA``, ``AGENTRT_CERT``, ``AGENTRT_KEY``, ``AGENTRT_TOKEN``, ``AGENTRT_TOKEN_FILE``,
``AGENTRT_SERVER_NAME`` and ``AGENTRT_TLS``.

Exit codes: 0 success; 1 a followed run did not complete (or the demo failed);
2 usage error, unusable credentials (``error: ...``) or a failed call
(``error: CODE message [reason=...]`` on stderr); 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, cast

import grpc
from google.rpc import error_details_pb2  # type: ignore[import-untyped]

from agentrt.client import _demo
from agentrt.client._base import DETAILS
from agentrt.client._client import DEFAULT_TIMEOUT, default_target
from agentrt.client._dev_pki import add_dev_pki_command
from agentrt.client._diagnostics import diagnostics_to_json, format_diagnostics
from agentrt.client._errors import CredentialsError, RPCError
from agentrt.client._format import event_to_json, format_event, format_run, format_run_line, run_to_json
from agentrt.client._health import add_health_command
from agentrt.client._payloads import PayloadMismatch
from agentrt.client._sync_client import Client
from agentrt.client._tokens import DEFAULT_TENANT, ROLES, hash_token_command
from agentrt.proto.runtime.v1 import run_pb2

# Subcommands whose arguments belong to another program's parser, passed on verbatim.
_DELEGATES: Final = {
    "serve": "agentrt.server",
    "toolhost": "agentrt.toolhost",
    "prune": "agentrt.server._prune_main",
    "migrate": "agentrt.server._migrate_main",
}
# The distribution that provides each delegate's module (the client installs without them).
_PROVIDERS: Final = {"agentrt.server": "agentrt-server", "agentrt.toolhost": "agentrt-toolhost"}
# Global options that take a value, so the split below can skip it.
_GLOBAL_WITH_VALUE: Final = frozenset(
    {"--target", "--timeout", "--ca", "--cert", "--key", "--token", "--token-file", "--server-name"}
)


def installed_versions() -> list[tuple[str, str]]:
    """``(name, version)`` of every installed distribution whose name starts with ``agentrt``, by name."""
    found: dict[str, tuple[str, str]] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] or ""
        key = name.lower().replace("_", "-")
        # Two entries of one name (a stale copy on sys.path): the first wins, as it does for imports.
        if key.startswith("agentrt") and key not in found:
            found[key] = (name, dist.version)
    return sorted(found.values())


class _VersionAction(argparse.Action):
    """``--version``: the versions are looked up only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        print("\n".join(f"{name} {version}" for name, version in installed_versions()))
        parser.exit()


def _phase(text: str) -> run_pb2.RunPhase:
    name = text.strip().upper().replace("-", "_")
    if not name.startswith("RUN_PHASE_"):
        name = "RUN_PHASE_" + name
    try:
        return cast(run_pb2.RunPhase, run_pb2.RunPhase.Value(name))
    except ValueError:
        choices = ", ".join(n.removeprefix("RUN_PHASE_").lower() for n in run_pb2.RunPhase.keys()[1:])
        raise argparse.ArgumentTypeError(f"unknown phase {text!r} (choose from {choices})") from None


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


def _add_global_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument(
        # Read at parse time, not import time, so AGENTRT_TARGET set later still counts.
        "--target",
        default=default(default_target()),
        help="runtime address HOST:PORT (env AGENTRT_TARGET)",
    )
    parser.add_argument(
        "--json", action="store_true", default=default(False), help="machine output: one JSON object per line"
    )
    parser.add_argument(
        "--timeout",
        type=_positive_float,
        default=default(DEFAULT_TIMEOUT),
        help="deadline of unary calls, seconds",
    )
    # None means "not given": the client then reads the AGENTRT_* variable.
    security = [
        ("--ca", "FILE", "PEM CA to verify the server with; turns TLS on (env AGENTRT_CA)"),
        ("--cert", "FILE", "PEM client certificate, for mTLS (env AGENTRT_CERT)"),
        ("--key", "FILE", "PEM key of the client certificate (env AGENTRT_KEY)"),
        (
            "--token",
            "TOKEN",
            "bearer token (env AGENTRT_TOKEN); visible to other local users in the process "
            "list, prefer --token-file",
        ),
        ("--token-file", "FILE", "file whose first line is the bearer token (env AGENTRT_TOKEN_FILE)"),
        ("--server-name", "NAME", "name the server certificate must carry (env AGENTRT_SERVER_NAME)"),
    ]
    for flag, metavar, text in security:
        parser.add_argument(flag, metavar=metavar, default=default(None), help=text)
    parser.add_argument(
        "--tls",
        action="store_const",
        const=True,
        default=default(None),
        help="use TLS with the system's CAs when no --ca is given (env AGENTRT_TLS)",
    )


def build_parser() -> argparse.ArgumentParser:
    """Builds the ``agentrt`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="agentrt", description="Start, follow and inspect agentrt runs; run the runtime and tool hosts."
    )
    parser.add_argument(
        "--version", action=_VersionAction, help="print the version of every installed agentrt distribution"
    )
    _add_global_options(parser, defaults=True)
    # The same options after the command (`agentrt get RUN --json`); they override only when given.
    common = argparse.ArgumentParser(add_help=False)
    _add_global_options(common, defaults=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sub.add_parser("serve", help="run the runtime server (arguments go to it; see `agentrt serve --help`)")
    sub.add_parser("toolhost", help="run a tool host (arguments go to it; see `agentrt toolhost --help`)")
    sub.add_parser(
        "prune",
        help="prune ended runs past their retention age from the server's database "
        "(arguments go to it; see `agentrt prune --help`)",
    )

    sub.add_parser(
        "migrate",
        help="upgrade, downgrade, check or show the schema of the server's database "
        "(arguments go to it; see `agentrt migrate --help`)",
    )

    p = sub.add_parser("run", parents=[common], help="start a run of an agent")
    p.add_argument("agent", metavar="AGENT")
    p.add_argument("input", metavar="INPUT")
    p.add_argument(
        "--follow", action="store_true", help="stream events until the run ends; exit 1 unless it completed"
    )
    p.add_argument("--request-key", default="", help="idempotency key: a repeat attaches to the same run")
    p.add_argument("--session", default="", help="session the run is a turn of")
    p.add_argument("--budget-steps", type=_positive_int, help="at most this many model steps")
    p.add_argument("--timeout-s", type=_positive_float, help="the run's wall-clock budget, seconds")
    _detail_flag(p)
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("events", parents=[common], help="print a run's events")
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("--after", type=int, default=0, metavar="N", help="only events with seq > N")
    p.add_argument(
        "--follow",
        action="store_true",
        help="keep streaming until the run ends and its cleanup tail (if any) is settled",
    )
    _detail_flag(p)
    p.set_defaults(func=_cmd_events)

    p = sub.add_parser("get", parents=[common], help="print one run")
    p.add_argument("run_id", metavar="RUN_ID")
    p.set_defaults(func=_cmd_get)

    p = sub.add_parser(
        "diagnose",
        parents=[common],
        help="why is this run stuck: lease owner, faults, last error, pending calls, reconcile "
        "schedule (operator role)",
        description="Shows why a run is where it is (GetRunDiagnostics; the operator or admin "
        "role): what it waits for, the replica holding its lease and the lease's expiry, the "
        "fencing generation, faults and the last error, the reconcile schedule of an unknown "
        "outcome, cleanups, the trace id, and each pending call with its attempts, next retry "
        "and remote operation id.",
    )
    p.add_argument("run_id", metavar="RUN_ID")
    p.set_defaults(func=_cmd_diagnose)

    p = sub.add_parser("payload", parents=[common], help="fetch a payload of a run (a large result)")
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("payload_id", metavar="PAYLOAD_ID", help="payload_id of a PayloadRef in the run's events")
    p.add_argument("-o", "--output", default="-", metavar="FILE", help="write it here (default: stdout)")
    p.set_defaults(func=_cmd_payload)

    p = sub.add_parser("list", parents=[common], help="list runs, newest first")
    p.add_argument("--phase", type=_phase, action="append", default=[], metavar="P", help="repeatable")
    p.add_argument("--agent", default="", metavar="A")
    p.add_argument("--session", default="", metavar="S")
    p.add_argument("--limit", type=_positive_int, default=50, metavar="N")
    p.add_argument("--page-token", default="", metavar="T", help="next_page_token of a previous listing")
    p.add_argument(
        "--needs-attention", action="store_true", help="only runs whose wait was escalated to a person"
    )
    p.add_argument(
        "--cleanup-unknown",
        action="store_true",
        help="only runs whose cleanups may have left a resource behind (cleanup status UNKNOWN)",
    )
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("cancel", parents=[common], help="ask a run to stop")
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("--reason", default="", metavar="R")
    p.set_defaults(func=_cmd_cancel)

    for name, approve in (("approve", True), ("reject", False)):
        p = sub.add_parser(name, parents=[common], help=f"{name} a tool call waiting for a person")
        p.add_argument("run_id", metavar="RUN_ID")
        p.add_argument("approval_id", metavar="APPROVAL_ID")
        p.add_argument(
            "--args-hash", help="args_hash you were shown (default: the pending approval's, printed first)"
        )
        p.add_argument("--revision", type=int, help="run revision you saw (default: the current one)")
        p.add_argument("--comment", default="")
        p.set_defaults(func=_cmd_resolve, approve=approve)

    p = sub.add_parser("approvals", parents=[common], help="list the calls waiting for a person")
    p.add_argument("--limit", type=int, default=50, metavar="N")
    p.set_defaults(func=_cmd_approvals)

    p = sub.add_parser(
        "resolve", parents=[common], help="settle a run whose write has an unknown outcome (UNKNOWN_OUTCOME)"
    )
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("call_id", metavar="CALL_ID", help="call_id shown by tool.outcome.unknown")
    p.add_argument("decision", choices=["succeeded", "failed", "retry"])
    p.add_argument("--revision", type=int, required=True, help="run revision you saw (agentrt get)")
    p.add_argument("--result-json", default="", help="the call's result, for succeeded")
    p.add_argument("--comment", default="")
    p.set_defaults(func=_cmd_resolve_outcome)

    p = sub.add_parser(
        "demo", parents=[common], help="start a local runtime on demo defaults and run the refund-demo agent"
    )
    p.add_argument("--input", default=_demo.DEMO_INPUT, metavar="TEXT", help="the user's input")
    p.set_defaults(func=_cmd_demo)

    _add_auth_commands(sub)
    add_health_command(sub, common)
    return parser


def _add_auth_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    auth = sub.add_parser("auth", help="credentials: bearer tokens for [auth], a development PKI")
    auth_sub = auth.add_subparsers(dest="auth_command", required=True, metavar="AUTH_COMMAND")
    p = auth_sub.add_parser(
        "hash-token",
        help="print the [[tokens]] entry of a bearer token for the server's tokens_file",
        description=(
            "Reads a token from stdin (first line; not echoed on a terminal) or --token-file, or "
            "makes one with --generate, and prints its [[tokens]] entry (sha256 of the token) on "
            "stdout, ready to append to the server's tokens_file. A generated token is printed "
            "once on stderr, or written to a new 0600 file with --token-out."
        ),
    )
    # SUPPRESS: the global --token-file (before `auth`) and this one fill the same field.
    p.add_argument("--token-file", default=argparse.SUPPRESS, metavar="FILE", help="read the token here")
    p.add_argument("--generate", action="store_true", help="make a random token (token_urlsafe(32))")
    p.add_argument("--token-out", metavar="FILE", help="with --generate: write the token to this new file")
    p.add_argument("--subject", required=True, help="who the token authenticates (recorded on events)")
    p.add_argument("--tenant", default=DEFAULT_TENANT, help=f"tenant of its runs (default {DEFAULT_TENANT})")
    p.add_argument("--role", action="append", default=[], choices=ROLES, help="repeatable; default runner")
    p.set_defaults(func=_cmd_hash_token)

    add_dev_pki_command(auth_sub)


def main(argv: list[str] | None = None) -> int:
    """Runs the ``agentrt`` command line.

    Args:
        argv: The arguments, without the program name; ``sys.argv[1:]`` when None.

    Returns:
        The process exit code.
    """
    args = sys.argv[1:] if argv is None else list(argv)
    head, delegated = _split_delegated(args)
    parser = build_parser()
    try:
        ns = parser.parse_args(head)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    try:
        if ns.command in _DELEGATES:
            return _delegate(_DELEGATES[ns.command], delegated, prog=f"agentrt {ns.command}")
        func: Callable[[argparse.Namespace], int] = ns.func
        return func(ns)
    except RPCError as exc:
        _print_rpc_error(exc, ns.target)
        return 2
    except CredentialsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _split_delegated(args: Sequence[str]) -> tuple[list[str], list[str]]:
    # argparse mangles REMAINDER arguments that start with "-" (bpo-17050), so the
    # arguments after `serve` / `toolhost` are cut off before parsing.
    i = 0
    while i < len(args):
        token = args[i]
        if token in _GLOBAL_WITH_VALUE:
            i += 2
        elif token.startswith("-"):
            i += 1
        else:
            if token in _DELEGATES:
                return list(args[: i + 1]), list(args[i + 1 :])
            break
    return list(args), []


def _delegate(module_name: str, argv: list[str], *, prog: str) -> int:
    try:
        module = importlib.import_module(module_name)
        entry = module.main
    except (ImportError, AttributeError) as exc:
        provider = _PROVIDERS[module_name.split("._")[0]]
        print(f"error: {module_name} is not available ({exc}); pip install {provider}", file=sys.stderr)
        return 2
    # Every delegate's main takes prog=, so its --help and errors name the command as typed.
    try:
        code = entry(argv, prog=prog)
    except SystemExit as exc:  # argparse's --help or usage error in a delegate that lets it out
        code = exc.code if isinstance(exc.code, int) or exc.code is None else 2
    return int(code) if code is not None else 0


def _client(ns: argparse.Namespace) -> Client:
    return Client(
        ns.target,
        timeout=ns.timeout,
        ca_file=ns.ca,
        cert_file=ns.cert,
        key_file=ns.key,
        token=ns.token,
        token_file=ns.token_file,
        server_name=ns.server_name,
        tls=ns.tls,
    )


def _print_event(ns: argparse.Namespace, event: run_pb2.RunEvent) -> None:
    print(event_to_json(event) if ns.json else format_event(event), flush=True)


def _print_run(ns: argparse.Namespace, run: run_pb2.Run) -> None:
    print(run_to_json(run) if ns.json else format_run(run), flush=True)


def _detail_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--detail",
        choices=DETAILS,
        default="all",
        help="which events to print: all; milestones (no text deltas, step starts or checkpoints); "
        "final (only what ends the stream: run.ended, run.waiting, cleanup.settled)",
    )


def _cmd_run(ns: argparse.Namespace) -> int:
    budgets: run_pb2.Budgets | None = None
    if ns.budget_steps is not None or ns.timeout_s is not None:
        budgets = run_pb2.Budgets(max_model_steps=ns.budget_steps or 0)
        if ns.timeout_s is not None:
            budgets.timeout.FromNanoseconds(round(ns.timeout_s * 1e9))
    with _client(ns) as client:
        if not ns.follow:
            run = client.start_run(
                ns.agent, ns.input, budgets=budgets, request_key=ns.request_key, session_id=ns.session
            )
            _print_run(ns, run)
            return 0
        run_id = ""
        stream = client.run_agent(
            ns.agent,
            ns.input,
            budgets=budgets,
            request_key=ns.request_key,
            session_id=ns.session,
            detail=ns.detail,
        )
        with stream:
            for event in stream:
                run_id = event.run_id or run_id
                _print_event(ns, event)
        if stream.ended is None and run_id:
            # The stream ended where the run waits for something outside itself, not at its end.
            print(_waiting_note(run_id, stream.waiting, stream.last_seq), file=sys.stderr)
        elif stream.tail_open and stream.waiting is not None:
            print(_tail_note(run_id, stream.waiting, stream.last_seq), file=sys.stderr)
        return 0 if stream.ended is not None and stream.ended.phase == run_pb2.RUN_PHASE_COMPLETED else 1


_NEXT_STEP = {
    run_pb2.WAIT_REASON_APPROVAL: "approve or reject it (agentrt approvals)",
    run_pb2.WAIT_REASON_BUDGET: "grant more budget or refuse (agentrt approvals)",
    run_pb2.WAIT_REASON_UNKNOWN_OUTCOME: "reconciliation or a person settles the write (agentrt resolve)",
    run_pb2.WAIT_REASON_SESSION_QUEUE: "it starts when the session's earlier run ends",
}


def _waiting_note(run_id: str, waiting: run_pb2.RunWaiting | None, last_seq: int) -> str:
    """What to tell a person whose RunAgent stream ended before the run did."""
    follow = f"agentrt events {run_id} --after {last_seq} --follow"
    if waiting is None:
        return f"run {run_id} has not ended; follow it with: {follow}"
    reason = (
        run_pb2.WaitReason.Name(waiting.reason).removeprefix("WAIT_REASON_")
        if waiting.reason in run_pb2.WaitReason.values()
        else str(waiting.reason)
    )
    detail = f" {waiting.detail}" if waiting.detail else ""
    step = _NEXT_STEP.get(waiting.reason, "")
    return f"run {run_id} waits: {reason}{detail}" + (f"; {step}" if step else "") + f"; then: {follow}"


def _tail_note(run_id: str, waiting: run_pb2.RunWaiting, last_seq: int) -> str:
    """What to tell a person whose run ended while cleanups it could not release are retried."""
    return (
        f"run {run_id} ended; cleanups not released yet: {waiting.detail or '?'} "
        f"(the server's cleanup job retries them; agentrt list --cleanup-unknown); "
        f"follow them with: agentrt events {run_id} --after {last_seq} --follow"
    )


def _cmd_events(ns: argparse.Namespace) -> int:
    with (
        _client(ns) as client,
        client.stream_events(ns.run_id, after_seq=ns.after, follow=ns.follow, detail=ns.detail) as stream,
    ):
        for event in stream:
            _print_event(ns, event)
    return 0


def _cmd_get(ns: argparse.Namespace) -> int:
    with _client(ns) as client:
        _print_run(ns, client.get_run(ns.run_id))
    return 0


def _cmd_diagnose(ns: argparse.Namespace) -> int:
    with _client(ns) as client:
        found = client.get_run_diagnostics(ns.run_id)
    print(diagnostics_to_json(found) if ns.json else format_diagnostics(found), flush=True)
    return 0


def _cmd_payload(ns: argparse.Namespace) -> int:
    with _client(ns) as client:
        try:
            payload = client.get_payload(ns.run_id, ns.payload_id)
        except PayloadMismatch as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    if ns.output == "-":
        sys.stdout.buffer.write(payload.data)
        sys.stdout.buffer.flush()
    else:
        Path(ns.output).write_bytes(payload.data)
        print(f"{payload.ref.size_bytes} bytes sha256={payload.ref.sha256} -> {ns.output}", file=sys.stderr)
    return 0


def _cmd_list(ns: argparse.Namespace) -> int:
    with _client(ns) as client:
        page = client.list_runs(
            page_size=ns.limit,
            page_token=ns.page_token,
            phases=ns.phase,
            agent_name=ns.agent,
            session_id=ns.session,
            needs_attention=ns.needs_attention,
            cleanup_unknown=ns.cleanup_unknown,
        )
    for run in page.runs:
        print(run_to_json(run) if ns.json else format_run_line(run))
    if page.next_page_token:
        print(f"more: --page-token {page.next_page_token}", file=sys.stderr)
    return 0


def _cmd_cancel(ns: argparse.Namespace) -> int:
    with _client(ns) as client:
        _print_run(ns, client.cancel_run(ns.run_id, reason=ns.reason))
    return 0


def _cmd_approvals(ns: argparse.Namespace) -> int:
    with _client(ns) as client:
        page = client.list_runs(page_size=ns.limit, phases=[run_pb2.RUN_PHASE_WAITING_APPROVAL])
    for run in page.runs:
        pending = run.pending_approval
        if ns.json:
            print(run_to_json(run))
            continue
        print(
            f"{run.run_id}  approval={pending.approval_id}  revision={run.revision}  "
            f"{pending.tool} {pending.arguments_json}\n    args_hash={pending.args_hash}  "
            f"expires={pending.expire_time.ToJsonString()}\n    impact: {pending.impact_summary}"
        )
    return 0


def _cmd_resolve(ns: argparse.Namespace) -> int:
    with _client(ns) as client:
        args_hash, revision = ns.args_hash, ns.revision
        if args_hash is None or revision is None:
            # Fill in what the person did not pass from the run as it is now, and show it.
            current = client.get_run(ns.run_id)
            pending = current.pending_approval
            args_hash = pending.args_hash if args_hash is None else args_hash
            revision = current.revision if revision is None else revision
            print(
                f"{pending.tool} {pending.arguments_json} args_hash={args_hash} revision={revision}",
                file=sys.stderr,
            )
        run = client.resolve_approval(
            ns.run_id,
            ns.approval_id,
            approve=ns.approve,
            args_hash=args_hash,
            expected_revision=revision,
            comment=ns.comment,
        )
        _print_run(ns, run)
    return 0


def _cmd_resolve_outcome(ns: argparse.Namespace) -> int:
    with _client(ns) as client:
        run = client.resolve_outcome(
            ns.run_id,
            ns.call_id,
            decision=ns.decision,
            expected_revision=ns.revision,
            result_json=ns.result_json,
            comment=ns.comment,
        )
        _print_run(ns, run)
    return 0


def _cmd_demo(ns: argparse.Namespace) -> int:
    return _demo.run_demo(input_text=ns.input, json_output=ns.json, timeout=ns.timeout)


def _cmd_hash_token(ns: argparse.Namespace) -> int:
    if ns.token is not None:
        raise CredentialsError("hash-token reads the token from stdin or --token-file, not --token")
    return hash_token_command(
        generate=ns.generate,
        token_file=ns.token_file,
        token_out=ns.token_out,
        subject=ns.subject,
        tenant=ns.tenant,
        roles=ns.role,
    )


def _print_rpc_error(exc: RPCError, target: str) -> None:
    reason = f" [reason={exc.reason}]" if exc.reason else ""
    lines = [f"error: {exc.code.name} {exc.message}{reason}"]
    for detail in exc.details:
        if isinstance(detail, error_details_pb2.BadRequest):
            lines.extend(f"  field {v.field}: {v.description}" for v in detail.field_violations)
        elif isinstance(detail, error_details_pb2.PreconditionFailure):
            lines.extend(f"  precondition {v.type} {v.subject}: {v.description}" for v in detail.violations)
        elif isinstance(detail, error_details_pb2.RetryInfo):
            lines.append(f"  retry after {detail.retry_delay.ToTimedelta().total_seconds():g}s")
    if exc.code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        # e.g. the permission a role lacks and the subject the server saw.
        lines.extend(f"  {key}: {value}" for key, value in sorted(exc.metadata.items()))
    if exc.hint:
        lines.append(f"hint: {exc.hint}")
    elif exc.code == grpc.StatusCode.UNAVAILABLE:
        lines.append(f"hint: is `agentrt serve` running at {target}?")
    print("\n".join(lines), file=sys.stderr)
