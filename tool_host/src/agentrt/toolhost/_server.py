"""The ``agentrt.toolhost.v1.ToolHostService`` servicer."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, assert_never, cast

import grpc
import grpc.aio
import pluggy
import pydantic

from agentrt.proto.toolhost.v1 import tool_host_service_pb2 as pb
from agentrt.proto.toolhost.v1 import tool_host_service_pb2_grpc as pb_grpc
from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.toolhost._authorize import CallGate, grant_of
from agentrt.toolhost._config import ToolHostConfig
from agentrt.toolhost._context import ToolContext
from agentrt.toolhost._convert import failure_to_proto, operation_to_proto, timestamp_ns, tool_to_spec
from agentrt.toolhost._drain import CallDrain
from agentrt.toolhost._errors import ErrorCode, InvalidInput
from agentrt.toolhost._intents import Duplicate, IntentCall, Intents, Pending, intent_of
from agentrt.toolhost._ledger import (
    Busy,
    Conflict,
    Fenced,
    InFlight,
    OperationRecord,
    OperationStatus,
    OutcomeUnknown,
    ReadCall,
    Replay,
    Start,
)
from agentrt.toolhost._ledger_backend import LedgerBackend
from agentrt.toolhost._ledger_types import LedgerUnavailable
from agentrt.toolhost._ledger_verdict import Verdict, decision_of, verdict_on
from agentrt.toolhost._logging import log_fields
from agentrt.toolhost._operations import Operations
from agentrt.toolhost._outcome import Failure, Outcome
from agentrt.toolhost._plugins import answers_queries, preview, query_answerers
from agentrt.toolhost._sdk import SideEffect, Tool, canonical_json
from agentrt.toolhost._status import (
    InternalFailure,
    InvalidRequest,
    NotFound,
    RpcFailure,
    StaleFencingToken,
    abort_with,
)
from agentrt.toolhost._validate import MAX_TOOL_NAME_BYTES, check_field
from agentrt.toolhost.metadata import TRACEPARENT, CallMetadata, MetadataError, parse_call_metadata

__all__ = ["CallMetadata", "ToolHostServicer", "call_budget", "parse_metadata"]

_log = logging.getLogger(__name__)

# OpenTelemetry is optional (the ``otel`` extra): the tool SDK installs without it, and then no
# span is recorded and no trace continued.
try:
    from opentelemetry import propagate, trace
except ImportError:  # pragma: no cover - the SDK-only venv test covers it
    _HAVE_OTEL = False
else:
    _HAVE_OTEL = True

ServicerContext = grpc.aio.ServicerContext[Any, Any]

DEFAULT_MAX_RESULT_BYTES = 64 * 1024 * 1024  # without the x-agentrt-max-result-bytes header


def parse_metadata(metadata: Iterable[tuple[str, str | bytes]] | None) -> CallMetadata:
    """Read the agentrt call metadata (:func:`agentrt.toolhost.metadata.parse_call_metadata`).

    Raises:
        InvalidRequest: What the parser refuses, with its reason and one BadRequest violation
            naming the header.
    """
    try:
        return parse_call_metadata(metadata)
    except MetadataError as exc:
        raise InvalidRequest(str(exc), reason=exc.reason, violations=[(exc.header, exc.why)]) from None


def call_budget(
    *, tool_timeout: float, time_remaining: float | None, reserve: float
) -> tuple[float, float | None]:
    """Seconds a call may run, and seconds until the host must answer (R6.5).

    The run budget is the tool's timeout capped by the caller's deadline, less a small
    reserve (at most a tenth of what is left). The host answers half a reserve before
    the caller's deadline, so a tool's typed timeout reaches the caller before its
    deadline does.

    Args:
        tool_timeout: The tool's own timeout.
        time_remaining: Seconds until the gRPC deadline, or None without one.
        reserve: Seconds to keep back, at most.

    Returns:
        ``(budget, reply_within)``: a budget of zero or less means the deadline has passed;
        ``reply_within`` is None without a caller deadline.
    """
    if time_remaining is None:
        return tool_timeout, None
    kept = min(reserve, time_remaining / 10)
    return min(tool_timeout, time_remaining - kept), time_remaining - kept / 2


def _call_span(tool: str, run_id: str, traceparent: str | None) -> contextlib.AbstractContextManager[object]:
    """The span of one tool call, or nothing when no span would be recorded nor a trace continued."""
    if not _HAVE_OTEL:
        return contextlib.nullcontext()
    attributes = {"agentrt.tool": tool, "agentrt.run_id": run_id, "gen_ai.tool.name": tool}
    current = trace.get_current_span()
    if current.get_span_context().is_valid:
        # The host's InvokeTool span (TraceContextInterceptor) is the call's span: one span per
        # call, not two; a plugin's own spans nest right under it.
        current.set_attributes(attributes)
        return contextlib.nullcontext()
    # Until a provider is set (by code or OTEL_PYTHON_TRACER_PROVIDER), spans are no-ops: skip
    # their cost. A tool sees the same (invalid) current span either way.
    if traceparent is None and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return contextlib.nullcontext()
    # A host embedded without the interceptor: a span of its own, under the caller's traceparent.
    return trace.get_tracer("agentrt.toolhost").start_as_current_span(
        f"agentrt.tool {tool}",
        context=propagate.extract({TRACEPARENT: traceparent} if traceparent else {}),
        kind=trace.SpanKind.SERVER,
        attributes=attributes,
        # A tool's exception text may quote what it handles: never copied into the span.
        record_exception=False,
        set_status_on_exception=False,
    )


def _read_only_idempotent(tool: Tool) -> bool:
    """A tool whose calls record only their outcome: running one twice is harmless."""
    return tool.side_effect is SideEffect.READ_ONLY and tool.idempotent


def _input_hash(raw: object) -> str:
    """sha256 of the canonical arguments: what a ledger entry's key is checked against."""
    return hashlib.sha256(canonical_json(raw).encode()).hexdigest()


def _response(outcome: Outcome, *, replayed: bool = False) -> pb.InvokeToolResponse:
    if outcome.failure is not None:
        return pb.InvokeToolResponse(error=failure_to_proto(outcome.failure), replayed=replayed)
    return pb.InvokeToolResponse(result_json=outcome.result_json, replayed=replayed)


def _error(code: ErrorCode, message: str, details: Mapping[str, Any] | None = None) -> pb.InvokeToolResponse:
    return _response(Outcome.error(code, message, details))


class ToolHostServicer(pb_grpc.ToolHostServiceServicer):
    """Serves a fixed set of tools, one ledger entry per idempotency key.

    Args:
        tools: Tools by name.
        pm: Plugin manager, for ``agentrt_preview_tool``.
        ledger: The operation ledger.
        data_dir: Handed to tools in their context.
        counters: Counters to increment (shared with the host).
        gate: Checks call grants; None obeys every call as tenant "" (development).
        cancel_grace: Seconds a cancelled tool gets to stop on its own.
        deadline_reserve: Seconds kept back from the caller's deadline so a typed
            timeout reaches the caller before its deadline does.
        max_result_bytes: The largest result sent when a call does not name its maximum; a larger
            one is answered (and recorded) as RESULT_TOO_LARGE.
        config: What the plugins were configured with; the query hook gets it too. By default,
            ``data_dir`` and no options.
    """

    def __init__(
        self,
        *,
        tools: Mapping[str, Tool],
        pm: pluggy.PluginManager,
        ledger: LedgerBackend,
        data_dir: Path,
        counters: collections.Counter[str],
        gate: CallGate | None = None,
        cancel_grace: float = 2.0,
        deadline_reserve: float = 0.05,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        config: ToolHostConfig | None = None,
    ) -> None:
        self._config = config if config is not None else ToolHostConfig(data_dir=data_dir)
        answerers = query_answerers(pm)
        # What ListTools says is what GetOperation can really do (supports_query).
        self._tools = {
            name: dataclasses.replace(t, supports_query=answers_queries(t, plugin_answers=bool(answerers)))
            for name, t in tools.items()
        }
        self._max_result_bytes = max_result_bytes
        self._gate = gate if gate is not None else CallGate(verifier=None)
        self._pm = pm
        self._ledger = ledger
        self._data_dir = data_dir
        self._counters = counters
        self._reserve = deadline_reserve
        self._specs = [tool_to_spec(self._tools[name]) for name in sorted(self._tools)]
        self.operations = Operations(ledger=ledger, counters=counters, cancel_grace=cancel_grace)
        self.intents = Intents(ledger)
        self.drain = CallDrain()

    async def ListTools(self, request: pb.ListToolsRequest, context: ServicerContext) -> pb.ListToolsResponse:
        """Lists the tools, sorted by name."""
        return pb.ListToolsResponse(tools=self._specs)

    async def InvokeTool(
        self, request: pb.InvokeToolRequest, context: ServicerContext
    ) -> pb.InvokeToolResponse:
        """Invokes a tool once per idempotency key."""
        try:
            # At runtime a tuple of (key, value) pairs; the stubs say Mapping.
            meta = parse_metadata(
                cast(Iterable[tuple[str, str | bytes]] | None, context.invocation_metadata())
            )
            meta = self._granted(request, meta)
            fields = log_fields(run_id=meta.run_id, tenant=meta.tenant, call_id=meta.call_id)
            with self.drain.call(), _call_span(request.tool, meta.run_id, meta.traceparent), fields:
                return await self._invoke_logged(request, meta, context)
        except RpcFailure as exc:
            await abort_with(context, exc)
        except LedgerUnavailable as exc:
            # Raised before the tool started (a failed finish is handled in Operations): nothing ran,
            # so a retry under the same key is safe; the message holds no password.
            self._counters["ledger_unavailable"] += 1
            _log.warning("InvokeTool refused: %s", exc)
            return _error(
                ErrorCode.TRANSIENT,
                "the tool host's ledger is unavailable; the call did not start",
                {"ledger_unavailable": True},
            )
        except Exception:
            _log.exception("InvokeTool failed")
            await abort_with(context, InternalFailure("internal error", reason="INTERNAL"))

    def _granted(self, request: pb.InvokeToolRequest, meta: CallMetadata) -> CallMetadata:
        """The call as its grant allows it: the grant's tenant and fencing token (R3.3)."""
        if not self._gate.verifying:
            return meta
        granted = self._gate.invoke(
            grant=meta.grant,
            tool=request.tool,
            arguments_json=request.arguments_json,
            idempotency_key=meta.idempotency_key,
            run_id=meta.run_id,
            call_id=meta.call_id,
            fencing_token=meta.fencing_token,
        )
        return dataclasses.replace(
            meta,
            tenant=granted.tenant,
            fencing_token=granted.fencing_token,
            session_id=granted.session_id,
            intent_override=granted.intent_override,
        )

    async def _invoke_logged(
        self, request: pb.InvokeToolRequest, meta: CallMetadata, context: ServicerContext
    ) -> pb.InvokeToolResponse:
        if not _log.isEnabledFor(logging.DEBUG):
            return await self._invoke(request, meta, context)
        started = time.monotonic()
        response = await self._invoke(request, meta, context)
        _log.debug(
            "InvokeTool %s key=%s run=%s -> %s%s in %.3fs",
            request.tool,
            meta.idempotency_key,
            meta.run_id,
            tool_pb2.ToolErrorCode.Name(response.error.code) if response.HasField("error") else "ok",
            " (replayed)" if response.replayed else "",
            time.monotonic() - started,
        )
        return response

    async def _invoke(
        self, request: pb.InvokeToolRequest, meta: CallMetadata, context: ServicerContext
    ) -> pb.InvokeToolResponse:
        self._counters["invocations"] += 1
        check_field(request.tool, "tool", max_bytes=MAX_TOOL_NAME_BYTES)
        tool = self._tools.get(request.tool)
        if tool is None:
            return self._refuse(
                meta,
                "unknown_tool",
                _error(
                    ErrorCode.UNKNOWN_TOOL,
                    f"no tool named {request.tool!r} on this host",
                    {"tool": request.tool},
                ),
            )
        try:
            args, raw = tool.parse_arguments(request.arguments_json)
        except InvalidInput as exc:
            return self._refuse(meta, "invalid_input", _response(Outcome(failure=Failure.from_error(exc))))

        # time_remaining() is None when the caller set no deadline (the stubs say float).
        remaining: float | None = context.time_remaining()
        budget, reply_within = call_budget(
            tool_timeout=tool.timeout, time_remaining=remaining, reserve=self._reserve
        )
        if budget <= 0:
            return self._refuse(
                meta,
                "timeout",
                _error(ErrorCode.TRANSIENT, "timeout: the deadline passed before the call started"),
            )
        now = time.monotonic()
        deadline = now + budget
        reply_by = None if reply_within is None else now + reply_within

        fencing_token = meta.fencing_token
        intent = intent_of(tool, raw, run_id=meta.run_id, session_id=meta.session_id)
        if intent is None and _read_only_idempotent(tool):
            return await self._invoke_read(tool, args, raw, meta, deadline=deadline, reply_by=reply_by)
        # Hashed only now: a call refused above writes and compares no entry.
        input_hash = _input_hash(raw)
        if intent is not None:
            refused = await self._check_intent(intent, meta, deadline, tool=tool.name, input_hash=input_hash)
            if refused is not None:
                return refused
            fencing_token = None  # checked (and remembered) before the intent
        while True:
            # The first begin also checks the fencing token, in the same transaction; the call
            # is fenced or not once, as it arrives, not again after waiting for a duplicate.
            decision = self._ledger.begin(
                tenant=meta.tenant,
                idempotency_key=meta.idempotency_key,
                tool=tool.name,
                input_hash=input_hash,
                run_id=meta.run_id,
                call_id=meta.call_id,
                rerun_after_crash=tool.rerun_after_crash,
                fencing_token=fencing_token,
            )
            fencing_token = None
            match decision:
                case Fenced(highest_token=higher):
                    return self._fenced_error(meta, higher)
                case Start():
                    return await self._run_call(tool, args, meta, deadline=deadline, reply_by=reply_by)
                case Replay() | Conflict() | Busy() | OutcomeUnknown():
                    return self._answer(decision, meta)
                case InFlight():
                    running = self.operations.get(meta.idempotency_key, tenant=meta.tenant)
                    if running is None:
                        # RUNNING under this process but no task: its outcome could not be recorded.
                        return self._outcome_unknown(meta)
                    # A concurrent duplicate: wait for the first call, then decide again.
                    self._counters["in_flight_waits"] += 1
                    if not await self.operations.wait(running, within=deadline - time.monotonic()):
                        self._counters["timeout"] += 1
                        return _error(
                            ErrorCode.TRANSIENT,
                            "timeout: a call with the same idempotency key is still running",
                            {"still_running": True, "deadline_exceeded": True},
                        )
                case _:
                    assert_never(decision)

    async def _run_call(
        self,
        tool: Tool,
        args: pydantic.BaseModel,
        meta: CallMetadata,
        *,
        deadline: float,
        reply_by: float | None,
        read: ReadCall | None = None,
    ) -> pb.InvokeToolResponse:
        """Run a call the ledger let start (or, with ``read``, a read with no entry) and answer it."""
        ctx = ToolContext(
            idempotency_key=meta.idempotency_key,
            tenant=meta.tenant,
            run_id=meta.run_id,
            call_id=meta.call_id,
            attempt=meta.attempt,
            fencing_token=meta.fencing_token or 0,
            deadline=deadline,
            traceparent=meta.traceparent,
            data_dir=self._data_dir,
        )
        op = self.operations.start(
            key=meta.idempotency_key,
            tool=tool,
            args=args,
            ctx=ctx,
            max_result_bytes=meta.max_result_bytes or self._max_result_bytes,
            read=read,
        )
        now = time.monotonic()
        outcome = await self.operations.settle(
            op, budget=deadline - now, reply_within=None if reply_by is None else reply_by - now
        )
        return _response(outcome)

    async def _invoke_read(
        self,
        tool: Tool,
        args: pydantic.BaseModel,
        raw: object,
        meta: CallMetadata,
        *,
        deadline: float,
        reply_by: float | None,
    ) -> pb.InvokeToolResponse:
        """A read-only idempotent call: no RUNNING entry, only its outcome is written (``_operations``).

        Decided like :meth:`LedgerBackend.begin` decides, from what runs here and the ledger's
        entry, with the same answers (FENCED first, then a replay, a conflict, a wait for a
        duplicate running here).
        """
        if meta.fencing_token is not None and meta.run_id:
            higher = self._ledger.check_fence(meta.run_id, meta.fencing_token, tenant=meta.tenant)
            if higher is not None:
                return self._fenced_error(meta, higher)
        input_hash = _input_hash(raw)
        owner = self._ledger.owner
        while True:
            running = self.operations.get(meta.idempotency_key, tenant=meta.tenant)
            if running is not None and running.read is not None:
                record: OperationRecord | None = running.read.running_record(owner=owner)
            else:
                record = self._ledger.get(meta.idempotency_key, tenant=meta.tenant)
            verdict = Verdict.RUN_AGAIN
            if record is not None:
                verdict = verdict_on(
                    record,
                    tool=tool.name,
                    input_hash=input_hash,
                    me=owner,
                    record_owner_alive=record.status is OperationStatus.RUNNING
                    and record.owner != owner
                    and not self._ledger.is_orphan(record),
                    rerun_after_crash=True,
                )
            match verdict:
                case Verdict.RUN_AGAIN:
                    read = ReadCall(
                        tenant=meta.tenant,
                        idempotency_key=meta.idempotency_key,
                        tool=tool.name,
                        input_hash=input_hash,
                        run_id=meta.run_id,
                        call_id=meta.call_id,
                        start_time_ns=time.time_ns(),
                    )
                    return await self._run_call(
                        tool, args, meta, deadline=deadline, reply_by=reply_by, read=read
                    )
                case Verdict.IN_FLIGHT:
                    if running is None:
                        return self._outcome_unknown(meta)  # as begin's InFlight with no task here
                    self._counters["in_flight_waits"] += 1
                    if not await self.operations.wait(running, within=deadline - time.monotonic()):
                        self._counters["timeout"] += 1
                        return _error(
                            ErrorCode.TRANSIENT,
                            "timeout: a call with the same idempotency key is still running",
                            {"still_running": True, "deadline_exceeded": True},
                        )
                case _:
                    assert record is not None
                    decision = decision_of(verdict, record)
                    assert isinstance(decision, Replay | Conflict | Busy | OutcomeUnknown)
                    return self._answer(decision, meta)

    def _answer(
        self, decision: Replay | Conflict | Busy | OutcomeUnknown, meta: CallMetadata
    ) -> pb.InvokeToolResponse:
        """The answer to a call the ledger's entry settles without running it."""
        match decision:
            case Replay(record=record):
                self._counters["duplicate_suppressed"] += 1
                assert record.outcome is not None
                return _response(record.outcome, replayed=True)
            case Conflict(record=record):
                self._counters["key_conflict"] += 1
                return _error(
                    ErrorCode.KEY_CONFLICT,
                    "the idempotency key was used before with another tool or other arguments",
                    {"idempotency_key": meta.idempotency_key, "recorded_tool": record.tool},
                )
            case Busy():
                # Another live host of the pool runs this key now: a retry with it replays.
                self._counters["busy_elsewhere"] += 1
                return _error(
                    ErrorCode.TRANSIENT,
                    "a call with the same idempotency key is running on another host of the pool",
                    {"still_running": True, "idempotency_key": meta.idempotency_key},
                )
            case OutcomeUnknown():
                return self._outcome_unknown(meta)
            case _:
                assert_never(decision)

    def _entry(self, idempotency_key: str, *, tenant: str) -> OperationRecord | None:
        """The key's entry as this host knows it: a read running here has none in the ledger yet."""
        running = self.operations.get(idempotency_key, tenant=tenant)
        if running is not None and running.read is not None:
            return running.read.running_record(owner=self._ledger.owner)
        return self._ledger.get(idempotency_key, tenant=tenant)

    async def _check_intent(
        self, intent: IntentCall, meta: CallMetadata, deadline: float, *, tool: str, input_hash: str
    ) -> pb.InvokeToolResponse | None:
        """None when the call may run its intent (claimed now); else the answer instead of running.

        The fencing token is checked first, so a stale caller hears FENCED, not an earlier result.
        A key the ledger knows is its own business first (a replay, a conflict, a call in flight):
        only a call that would run (a new key, or a retry after a retryable failure) meets the
        intent. No await may come between a claim and the ledger's begin that follows it.
        """
        if meta.fencing_token is not None and meta.run_id:
            higher = self._ledger.check_fence(meta.run_id, meta.fencing_token, tenant=meta.tenant)
            if higher is not None:
                return self._fenced_error(meta, higher)
        known = self._ledger.get(meta.idempotency_key, tenant=meta.tenant)
        if known is not None and not (
            (known.tool, known.input_hash) == (tool, input_hash)
            and known.outcome is not None
            and known.outcome.retryable
        ):
            return None
        while True:
            decision = self.intents.claim(
                intent,
                tenant=meta.tenant,
                idempotency_key=meta.idempotency_key,
                override=meta.intent_override,
            )
            match decision:
                case Duplicate(first=first):
                    self._counters["duplicate_suppressed"] += 1
                    self._counters["intent_duplicate"] += 1
                    assert first.outcome is not None
                    response = _response(first.outcome)
                    response.deduplicated = True
                    response.duplicate_of.CopyFrom(
                        tool_pb2.IntentDuplicate(
                            intent_key=intent.key,
                            idempotency_key=first.idempotency_key,
                            run_id=first.run_id,
                            call_id=first.call_id,
                            first_time=timestamp_ns(first.create_time_ns),
                        )
                    )
                    return response
                case Pending(first_key=first_key):
                    running = self.operations.get(first_key, tenant=meta.tenant)
                    if running is not None and await self.operations.wait(
                        running, within=deadline - time.monotonic()
                    ):
                        continue  # the earlier call of this process ended: decide again
                    self._counters["intent_pending"] += 1
                    # Not run, and never will be under this key until asked again: a plain retry.
                    return _error(
                        ErrorCode.TRANSIENT,
                        "an earlier call with the same intent is still running or its outcome is not "
                        "known yet; this call did not run",
                        {"intent_key": intent.key, "duplicate_of": first_key},
                    )
                case _:
                    if decision.overridden:
                        self._counters["intent_override"] += 1
                    return None

    def _refuse(
        self, meta: CallMetadata, counter: str, response: pb.InvokeToolResponse
    ) -> pb.InvokeToolResponse:
        """Answer a call refused before it reaches :meth:`Ledger.begin`.

        The fencing token is still checked (and remembered) first, on its own, so a stale
        caller hears FENCED whatever else is wrong with its call.
        """
        if meta.fencing_token is not None and meta.run_id:
            higher = self._ledger.check_fence(meta.run_id, meta.fencing_token, tenant=meta.tenant)
            if higher is not None:
                return self._fenced_error(meta, higher)
        self._counters[counter] += 1
        return response

    def _fenced_error(self, meta: CallMetadata, higher: int) -> pb.InvokeToolResponse:
        self._counters["fenced"] += 1
        return _error(
            ErrorCode.FENCED,
            f"fencing token {meta.fencing_token} is older than {higher}, already seen for this run",
            {"run_id": meta.run_id, "fencing_token": meta.fencing_token, "highest_token": higher},
        )

    def _outcome_unknown(self, meta: CallMetadata) -> pb.InvokeToolResponse:
        self._counters["outcome_unknown"] += 1
        return _error(
            ErrorCode.TRANSIENT,
            "outcome unknown: an earlier host process stopped while this call ran; "
            "query GetOperation or reconcile by hand",
            {"idempotency_key": meta.idempotency_key, "status": "RUNNING"},
        )

    async def GetOperation(
        self, request: pb.GetOperationRequest, context: ServicerContext
    ) -> pb.GetOperationResponse:
        """Reports a past invocation by idempotency key, within the tenant of the call's grant."""
        try:
            tenant, run_id = self._gate.get_operation(
                grant=grant_of(cast(Iterable[tuple[str, str | bytes]] | None, context.invocation_metadata())),
                idempotency_key=request.idempotency_key,
            )
            record = self._granted_entry(request.idempotency_key, tenant=tenant, run_id=run_id)
            if self._ledger.is_orphan(record):
                record = await self._settle_from_tool(record)
            elif record.outcome is not None and record.outcome.effect_unknown:
                record = await self._settle_stopped(record)
            return pb.GetOperationResponse(operation=operation_to_proto(record))
        except RpcFailure as exc:
            await abort_with(context, exc)
        except Exception:
            _log.exception("GetOperation failed")
            await abort_with(context, InternalFailure("internal error", reason="INTERNAL"))

    def _granted_entry(self, idempotency_key: str, *, tenant: str, run_id: str | None) -> OperationRecord:
        """The ledger entry of ``idempotency_key`` that a grant for ``tenant`` and ``run_id`` covers.

        Another tenant's entry is not found, exactly like a missing one; so is another run's. The
        grant binds its run, and the runtime only asks about, or stops, its own run's calls: a
        grant whose run did not start the entry must neither act on it nor learn it exists.

        Raises:
            InvalidRequest: The key is missing or malformed.
            NotFound: No entry this grant covers.
        """
        if not idempotency_key:
            raise InvalidRequest(
                "idempotency_key is required",
                reason="MISSING_FIELD",
                violations=[("idempotency_key", "required")],
            )
        check_field(idempotency_key, "idempotency_key")
        record = self._entry(idempotency_key, tenant=tenant)
        if record is None or (run_id is not None and record.run_id != run_id):
            raise NotFound(
                "no operation with this idempotency key",
                reason="OPERATION_NOT_FOUND",
                metadata={"idempotency_key": idempotency_key},
            )
        return record

    async def _settle_from_tool(self, record: OperationRecord) -> OperationRecord:
        """An earlier host life died while this call ran: ask the tool's own store (supports_query).

        A read-only or idempotent tool needs no store: such a call is simply run again.
        """
        tool = self._tools.get(record.tool)
        if tool is not None and tool.rerun_after_crash:
            rerun = Outcome.error(
                ErrorCode.TRANSIENT, "interrupted by a tool host restart; safe to run again under its key"
            )
            self._ledger.settle_orphan(record.idempotency_key, rerun, tenant=record.tenant)
            return self._ledger.get(record.idempotency_key, tenant=record.tenant) or record
        if tool is None or not tool.supports_query:
            return record  # no plugin answers for this tool: another's hook must not guess for it
        outcome = await self._ask_tool(record)
        if outcome is None:
            return record
        self._ledger.settle_orphan(record.idempotency_key, outcome, tenant=record.tenant)
        return self._ledger.get(record.idempotency_key, tenant=record.tenant) or record

    async def _settle_stopped(self, record: OperationRecord) -> OperationRecord:
        """This host stopped the write where it stood (a cancel, a deadline, a shutdown): ask the
        tool's own store what it did (supports_query), so a cancelled run learns it in time (§11.11).
        """
        tool = self._tools.get(record.tool)
        if tool is None or not tool.supports_query:
            return record
        stopped = record.outcome.failure if record.outcome is not None else None
        code = stopped.code if stopped is not None else ErrorCode.CANCELLED
        outcome = await self._ask_tool(
            record, absent=(code, "stopped before its effect: the tool has no trace of it")
        )
        if outcome is None:
            return record
        self._ledger.settle_unsure(record, outcome)
        return self._ledger.get(record.idempotency_key, tenant=record.tenant) or record

    async def _ask_tool(
        self,
        record: OperationRecord,
        *,
        absent: tuple[ErrorCode, str] = (
            ErrorCode.TRANSIENT,
            "interrupted before its effect: the tool has no trace of it",
        ),
    ) -> Outcome | None:
        """The tool's own word on a call (``agentrt_query_operation``); None when it cannot tell.

        ``absent`` is the failure recorded when the tool has no trace of the call (no effect).
        """
        answer = await asyncio.to_thread(
            self._pm.hook.agentrt_query_operation,
            tool=record.tool,
            idempotency_key=record.idempotency_key,
            data_dir=self._data_dir,
            config=self._config,
        )
        if not isinstance(answer, dict):
            return None
        if answer.get("status") == "succeeded":
            return Outcome.success(json.dumps(answer.get("result")))
        if answer.get("status") == "absent":
            return Outcome.error(*absent)
        return None

    async def CancelOperation(
        self, request: pb.CancelOperationRequest, context: ServicerContext
    ) -> pb.CancelOperationResponse:
        """Stops a running call on purpose (the caller's run was cancelled), by idempotency key."""
        try:
            tenant, run_id, fencing_token = self._gate.cancel_operation(
                grant=grant_of(cast(Iterable[tuple[str, str | bytes]] | None, context.invocation_metadata())),
                idempotency_key=request.idempotency_key,
            )
            self._granted_entry(request.idempotency_key, tenant=tenant, run_id=run_id)
            if run_id is not None and fencing_token is not None:
                # A stale owner of the run (another replica holds it now) must not stop the new
                # owner's work: the same fence as InvokeTool's.
                higher = self._ledger.check_fence(run_id, fencing_token, tenant=tenant)
                if higher is not None:
                    raise StaleFencingToken(
                        f"fencing token {fencing_token} is older than {higher}: another owner holds the run",
                        reason="FENCED",
                        metadata={"fencing_token": str(fencing_token), "current": str(higher)},
                    )
            signalled = self.operations.cancel(request.idempotency_key, tenant=tenant)
            if signalled:
                # repr: the reason is the caller's free text, never raw in a log line.
                _log.info("cancelling key %s on request: %r", request.idempotency_key, request.reason[:200])
            # Read again: a call that ended a moment ago reports its outcome.
            record = self._entry(request.idempotency_key, tenant=tenant)
            assert record is not None
            return pb.CancelOperationResponse(operation=operation_to_proto(record), signalled=signalled)
        except RpcFailure as exc:
            await abort_with(context, exc)
        except Exception:
            _log.exception("CancelOperation failed")
            await abort_with(context, InternalFailure("internal error", reason="INTERNAL"))

    async def PreviewTool(
        self, request: pb.PreviewToolRequest, context: ServicerContext
    ) -> pb.PreviewToolResponse:
        """Describes the impact a call would have; runs no effect."""
        try:
            self._gate.preview(
                grant=grant_of(cast(Iterable[tuple[str, str | bytes]] | None, context.invocation_metadata())),
                tool=request.tool,
                arguments_json=request.arguments_json,
            )
            check_field(request.tool, "tool", max_bytes=MAX_TOOL_NAME_BYTES)
            tool = self._tools.get(request.tool)
            if tool is None:
                raise NotFound(
                    f"no tool named {request.tool!r} on this host",
                    reason="UNKNOWN_TOOL",
                    metadata={"tool": request.tool},
                )
            try:
                _, raw = tool.parse_arguments(request.arguments_json)
            except InvalidInput as exc:
                violations = [
                    (".".join(["arguments_json", *map(str, e.get("loc", []))]), str(e.get("msg", "")))
                    for e in exc.details.get("errors", [])
                ]
                raise InvalidRequest(exc.message, reason="INVALID_ARGUMENTS", violations=violations) from None
            try:
                # In a thread: hooks are sync plugin code and must not stall the host's loop.
                summary = await asyncio.to_thread(preview, self._pm, tool.name, raw)
            except Exception as exc:
                _log.warning("agentrt_preview_tool failed for %s", tool.name, exc_info=True)
                raise InternalFailure(
                    f"the preview hook failed: {type(exc).__name__}",
                    reason="PREVIEW_FAILED",
                    metadata={"tool": tool.name},
                ) from None
            return pb.PreviewToolResponse(impact_summary=summary)
        except RpcFailure as exc:
            await abort_with(context, exc)
        except Exception:
            _log.exception("PreviewTool failed")
            await abort_with(context, InternalFailure("internal error", reason="INTERNAL"))
