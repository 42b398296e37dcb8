"""gRPC servicer of ``agentrt.runtime.v1.AgentRuntimeService``: validation at the edge, then the engine.

A person's decision (ResolveApproval, ResolveOutcome, CancelRun) becomes a typed core signal
here; the engine decides it against the run's row by the core's rules and answers with the
refusal or the run. The servicer checks shapes and who is calling, never the run's state, and
reads no run log.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
from pydantic import ValidationError

from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2, runtime_service_pb2_grpc
from agentrt.server.api._convert import (
    agent_from_proto,
    approval_signal,
    budgets_from_proto,
    cancel_signal,
    detail_from_proto,
    outcome_signal,
    phase_from_proto,
    run_to_proto,
)
from agentrt.server.api._diagnostics import diagnostics_to_proto
from agentrt.server.api._errors import abort_internal, abort_with
from agentrt.server.api._inline import INLINE_AGENT_NAME, check_inline_agent
from agentrt.server.api._page_tokens import PageTokens, RunPage
from agentrt.server.api._payloads import find_payload, payload_responses
from agentrt.server.api._request_keys import request_hash
from agentrt.server.api._stream_writer import send_event_batches, send_events
from agentrt.server.api._streams import Detail, Follower, current_waiting
from agentrt.server.api._tombstones import refuse_pruned
from agentrt.server.api._validate import check_enum, check_id, check_json, check_start, check_text
from agentrt.server.api._wire import batch_response, event_bytes, single_response
from agentrt.server.auth import Principal, current_principal
from agentrt.server.config import AuthConfig, Settings
from agentrt.server.core import (
    AgentRtError,
    ApproverScope,
    InvalidRequest,
    NoSuchResource,
    PayloadTooLarge,
    SignalRules,
)
from agentrt.server.engine import Engine, ResolvedAgent, StartRequest
from agentrt.server.store import RunRecord, pending_approval_of

Context = grpc.aio.ServicerContext[Any, Any]
_MAX_COMMENT_BYTES = 4096  # stored truncated to 400 characters; longer is a client bug or abuse
_MAX_PAGE = 500


class RuntimeServicer(runtime_service_pb2_grpc.AgentRuntimeServiceServicer):
    """Thin: every handler validates, calls the engine or store, converts."""

    def __init__(self, *, engine: Engine, settings: Settings, page_tokens: PageTokens | None = None):
        self.engine = engine
        self.store = engine.store
        self.settings = settings
        self.page_tokens = page_tokens or PageTokens.for_settings(settings)

    def _id(self, value: str, field: str, *, required: bool = True) -> str:
        return check_id(value, field, max_bytes=self.settings.limits.max_id_bytes, required=required)

    @staticmethod
    def _principal() -> Principal:
        # Set by the AuthInterceptor for every call but health checks.
        return current_principal()

    def _rules(self, principal: Principal) -> SignalRules:
        return signal_rules(self.settings.auth, principal)

    # -- starting -----------------------------------------------------------------------------------

    def _resolve_agent(
        self, request: runtime_service_pb2.RunAgentRequest | runtime_service_pb2.StartRunRequest
    ) -> ResolvedAgent:
        if request.HasField("agent"):
            check_inline_agent(request.agent, settings=self.settings, principal=self._principal())
            try:
                config = agent_from_proto(request.agent)
            except ValidationError as exc:
                first = exc.errors()[0]
                field = "agent." + ".".join(str(p) for p in first["loc"])
                raise InvalidRequest(f"inline agent is invalid: {first['msg']}", field=field) from exc
            name = request.agent.name or INLINE_AGENT_NAME
        else:
            if not request.agent_name:
                raise InvalidRequest("agent_name or an inline agent is required", field="agent_name")
            found = self.settings.agents.get(request.agent_name)
            if found is None:
                raise NoSuchResource(
                    f"no agent named {request.agent_name!r} is configured",
                    reason="AGENT_NOT_FOUND",
                    metadata={"agent_name": request.agent_name},
                )
            config, name = found, request.agent_name
        return ResolvedAgent.resolve(name, config, self.settings.agents)

    def _start_request(
        self,
        request: runtime_service_pb2.RunAgentRequest | runtime_service_pb2.StartRunRequest,
        context: Context,
    ) -> StartRequest:
        limits = self.settings.limits
        check_start(request, limits=limits)
        if not request.input.strip():
            raise InvalidRequest("input is required", field="input")
        size = len(request.input.encode())
        if size > limits.max_input_bytes:
            raise PayloadTooLarge(
                f"input is {size} bytes; the limit is {limits.max_input_bytes}",
                field="input",
                metadata={"limit": str(limits.max_input_bytes), "size": str(size)},
            )
        principal = self._principal()
        return StartRequest(
            tenant_id=principal.tenant,
            created_by=principal.subject,
            agent=self._resolve_agent(request),
            input=request.input,
            budget_overrides=budgets_from_proto(request.budgets),
            request_key=request.request_key,
            request_hash=request_hash(request) if request.request_key else "",
            metadata=dict(request.metadata),
            session_id=request.session_id,
            session_policy=_session_policy(request.session_policy),
        )

    # Streams are coroutines writing with context.write (not generators), so a write to a reader
    # that stopped reading can be timed out: see _stream_writer.
    async def RunAgent(  # type: ignore[override]
        self, request: runtime_service_pb2.RunAgentRequest, context: Context
    ) -> None:
        """Streams until the run ends or waits outside itself; then the last item is run.waiting."""
        try:
            detail = _detail(request.detail)  # before the run starts: a refused request starts nothing
            record, _ = await self.engine.start_run(
                self._start_request(request, context), admit=True, rules=self._rules(self._principal())
            )
            refuse_pruned(record)  # a repeated request_key attaching to a pruned run
        except AgentRtError as exc:
            await abort_with(context, exc)
        except Exception as exc:
            await abort_internal(context, exc)
        follower = self._follower(record.run_id, after_seq=0, follow=True, stop_at_wait=True, detail=detail)
        await self._send(follower, context, batched=request.batch_events)

    def _follower(
        self, run_id: str, *, after_seq: int, follow: bool, detail: Detail, stop_at_wait: bool = False
    ) -> Follower:
        # Built (and so subscribed) before any await on the stream's path: no live event is missed.
        return Follower(
            store=self.store,
            bus=self.engine.bus,
            run_id=run_id,
            after_seq=after_seq,
            follow=follow,
            stop_at_wait=stop_at_wait,
            config=self.settings.streams,
            now_ms=self.engine.now_ms,
            detail=detail,
        )

    async def _send(self, follower: Follower, context: Context, *, batched: bool) -> None:
        # Responses are written as bytes (api/_wire): an event's are made once for all followers.
        stall_timeout_s = self.settings.streams.stall_timeout_s
        try:
            if batched:
                await send_event_batches(
                    follower,
                    lambda batch: context.write(batch_response(batch)),
                    convert=event_bytes,
                    stall_timeout_s=stall_timeout_s,
                )
            else:
                await send_events(
                    follower,
                    lambda one: context.write(single_response(one)),
                    convert=event_bytes,
                    stall_timeout_s=stall_timeout_s,
                )
        except AgentRtError as exc:
            await abort_with(context, exc)
        except Exception as exc:
            await abort_internal(context, exc)

    async def StartRun(
        self, request: runtime_service_pb2.StartRunRequest, context: Context
    ) -> runtime_service_pb2.StartRunResponse:
        try:
            record, _ = await self.engine.start_run(
                self._start_request(request, context), admit=True, rules=self._rules(self._principal())
            )
        except AgentRtError as exc:
            await abort_with(context, exc)
        except Exception as exc:
            await abort_internal(context, exc)
        return runtime_service_pb2.StartRunResponse(run=run_to_proto(record))

    # -- reading ------------------------------------------------------------------------------------

    async def _get(self, run_id: str, context: Context) -> RunRecord:
        self._id(run_id, "run_id")
        record = await self.store.get_run(run_id, tenant_id=self._principal().tenant)
        if record is None:
            raise NoSuchResource(f"no run {run_id!r}", reason="RUN_NOT_FOUND", metadata={"run_id": run_id})
        return record

    async def GetRun(
        self, request: runtime_service_pb2.GetRunRequest, context: Context
    ) -> runtime_service_pb2.GetRunResponse:
        try:
            record = await self._get(request.run_id, context)
        except AgentRtError as exc:
            await abort_with(context, exc)
        return runtime_service_pb2.GetRunResponse(run=run_to_proto(record))

    async def GetRunDiagnostics(
        self, request: runtime_service_pb2.GetRunDiagnosticsRequest, context: Context
    ) -> runtime_service_pb2.GetRunDiagnosticsResponse:
        # The operator role is checked by the interceptor; the tenant scopes the read (_get).
        try:
            record = await self._get(request.run_id, context)
            found = await self.engine.diagnose(record)  # the same row: both say the same moment
            reconcile = found.reconcile
            waiting = await current_waiting(
                self.store, record, unknown_call=reconcile.call_id if reconcile is not None else ""
            )
            answer = diagnostics_to_proto(found, waiting=waiting)
        except AgentRtError as exc:
            await abort_with(context, exc)
        except Exception as exc:
            await abort_internal(context, exc)
        return runtime_service_pb2.GetRunDiagnosticsResponse(diagnostics=answer)

    async def ListRuns(
        self, request: runtime_service_pb2.ListRunsRequest, context: Context
    ) -> runtime_service_pb2.ListRunsResponse:
        try:
            if not 0 <= request.page_size <= _MAX_PAGE:
                raise InvalidRequest(f"page_size must be within 0..{_MAX_PAGE}", field="page_size")
            phases = sorted(
                {phase_from_proto(check_enum(p, "phases", run_pb2.RunPhase)).value for p in request.phases}
            )
            self._id(request.agent_name, "agent_name", required=False)
            self._id(request.session_id, "session_id", required=False)
            tenant = self._principal().tenant
            scope = [tenant, *phases, request.agent_name, request.session_id]
            if request.needs_attention:  # only then: tokens of unfiltered listings stay as they were
                scope.append("needs_attention")
            if request.cleanup_unknown:
                scope.append("cleanup_unknown")
            cursor = self.page_tokens.open(request.page_token, scope=scope) if request.page_token else ""
            page = RunPage(convert=run_to_proto)  # a page ends early rather than pass the reply limit
            try:
                _, token = await self.store.list_runs(
                    tenant_id=tenant,
                    phases=phases,
                    agent_name=request.agent_name,
                    session_id=request.session_id,
                    needs_attention=request.needs_attention,
                    cleanup_unknown=request.cleanup_unknown,
                    page_size=request.page_size or 50,
                    page_token=cursor,
                    fits=page.add,
                )
            except ValueError as exc:
                raise InvalidRequest("page_token is not valid", field="page_token") from exc
        except AgentRtError as exc:
            await abort_with(context, exc)
        return runtime_service_pb2.ListRunsResponse(
            runs=page.runs,
            next_page_token=self.page_tokens.seal(token, scope=scope) if token else "",
        )

    async def StreamRunEvents(  # type: ignore[override]
        self, request: runtime_service_pb2.StreamRunEventsRequest, context: Context
    ) -> None:
        """Replays, and with ``follow`` tails until the run ends: it follows through every wait.

        A follow stream of an ended run ends once the replay is sent, whatever ``after_seq`` is,
        unless its cleanup tail is open: then it follows the tail to ``cleanup.settled``.
        """
        try:
            if request.after_seq < 0:
                raise InvalidRequest("after_seq must not be negative", field="after_seq")
            detail = _detail(request.detail)
            refuse_pruned(await self._get(request.run_id, context))
        except AgentRtError as exc:
            await abort_with(context, exc)
        follower = self._follower(
            request.run_id, after_seq=request.after_seq, follow=request.follow, detail=detail
        )
        await self._send(follower, context, batched=request.batch_events)

    # -- control ------------------------------------------------------------------------------------

    async def CancelRun(
        self, request: runtime_service_pb2.CancelRunRequest, context: Context
    ) -> runtime_service_pb2.CancelRunResponse:
        try:
            check_text(request.reason, "reason", max_bytes=400)
            record = await self._get(request.run_id, context)
            principal = self._principal()
            signal = cancel_signal(request, requested_by=principal.subject)
            record = await self.engine.send_signal(record, signal, rules=self._rules(principal))
        except AgentRtError as exc:
            await abort_with(context, exc)
        return runtime_service_pb2.CancelRunResponse(run=run_to_proto(record))

    async def ResolveOutcome(
        self, request: runtime_service_pb2.ResolveOutcomeRequest, context: Context
    ) -> runtime_service_pb2.ResolveOutcomeResponse:
        try:
            check_enum(request.decision, "decision", runtime_service_pb2.OutcomeDecision)
            self._id(request.call_id, "call_id")
            check_text(request.comment, "comment", max_bytes=_MAX_COMMENT_BYTES)
            check_json(request.result_json, "result_json", max_bytes=self.settings.limits.max_input_bytes)
            record = await self._get(request.run_id, context)
            principal = self._principal()
            record = await self.engine.send_signal(
                record,
                outcome_signal(request, resolved_by=principal.subject),
                expected_revision=request.expected_revision,
                rules=self._rules(principal),
            )
        except AgentRtError as exc:
            await abort_with(context, exc)
        return runtime_service_pb2.ResolveOutcomeResponse(run=run_to_proto(record))

    async def GetPayload(
        self, request: runtime_service_pb2.GetPayloadRequest, context: Context
    ) -> AsyncIterator[runtime_service_pb2.GetPayloadResponse]:
        # Another tenant's payload answers like a missing one: NOT_FOUND, nothing about it leaks.
        try:
            self._id(request.run_id, "run_id")
            self._id(request.payload_id, "payload_id")
            try:
                stored = await find_payload(self.engine.payloads, request, tenant_id=self._principal().tenant)
            except NoSuchResource:
                refuse_pruned(await self._get(request.run_id, context))  # retention removed it
                raise
        except AgentRtError as exc:
            await abort_with(context, exc)
        try:
            async for response in payload_responses(
                self.engine.payloads, stored, chunk_bytes=self.settings.payloads.chunk_bytes
            ):
                yield response
        except AgentRtError as exc:
            await abort_with(context, exc)
        except Exception as exc:
            await abort_internal(context, exc)

    async def ResolveApproval(
        self, request: runtime_service_pb2.ResolveApprovalRequest, context: Context
    ) -> runtime_service_pb2.ResolveApprovalResponse:
        try:
            check_enum(request.decision, "decision", run_pb2.ApprovalDecision)
            self._id(request.approval_id, "approval_id")
            self._id(request.args_hash, "args_hash", required=False)
            check_text(request.comment, "comment", max_bytes=_MAX_COMMENT_BYTES)
            record = await self._get(request.run_id, context)
            principal = self._principal()
            # What waits names the signal: an answer to a budget pause is a grant.
            signal = approval_signal(request, approver=principal.subject, pending=pending_approval_of(record))
            record = await self.engine.send_signal(
                record, signal, expected_revision=request.expected_revision, rules=self._rules(principal)
            )
        except AgentRtError as exc:
            await abort_with(context, exc)
        return runtime_service_pb2.ResolveApprovalResponse(run=run_to_proto(record))


def signal_rules(auth: AuthConfig, principal: Principal) -> SignalRules:
    """What ``principal`` may signal under the server's auth policies (all off by default)."""
    scope = auth.approver_scopes.get(principal.subject)
    return SignalRules(
        own_runs_only=auth.own_runs_only,
        four_eyes=auth.four_eyes,
        manages_runs=principal.has_role("operator"),  # admin holds every role
        approver_scope=(
            ApproverScope(agents=frozenset(scope.agents), tools=frozenset(scope.tools)) if scope else None
        ),
    )


def _detail(value: int) -> Detail:
    """A stream's EventDetail; a number the enum does not have is refused (R10.4)."""
    known = check_enum(value, "detail", runtime_service_pb2.EventDetail, allow_unspecified=True)
    return detail_from_proto(known)


def _session_policy(value: int) -> str:
    # check_start has refused unknown numbers.
    name = runtime_service_pb2.SessionPolicy.Name(value).removeprefix("SESSION_POLICY_").lower()
    return "reject" if name == "unspecified" else name
