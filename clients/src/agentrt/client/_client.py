"""The asyncio client of ``agentrt.runtime.v1.AgentRuntimeService``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

import grpc
import grpc.aio

from agentrt.client import _errors
from agentrt.client._base import (
    DEFAULT_TARGET,
    DEFAULT_TIMEOUT,
    BaseClient,
    _detail,
    _list_request,
    _outcome_request,
    _resolve_request,
    _start_fields,
    default_target,
)
from agentrt.client._payloads import Payload, assemble_async
from agentrt.client._streams import AsyncEventStream
from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2, runtime_service_pb2_grpc

if TYPE_CHECKING:
    from agentrt.proto.runtime.v1.runtime_service_pb2_grpc import AgentRuntimeServiceAsyncStub

__all__ = ["DEFAULT_TARGET", "DEFAULT_TIMEOUT", "AsyncClient", "default_target"]

_R = TypeVar("_R")


class AsyncClient(BaseClient):
    """asyncio client of the agentrt runtime.

    Example::

        async with AsyncClient("127.0.0.1:50051") as client:
            async for event in client.run_agent("refund-demo", "Refund order A100"):
                print(format_event(event))

    Every unary call has a deadline (``timeout``). Streaming
    calls have none by default because runs can be long.

    Security options left as None come from ``AGENTRT_*`` variables; "" turns one off::

        AsyncClient("runtime.internal:50051", ca_file="ca.pem", cert_file="me.pem",
                    key_file="me.key", token_file="token.txt")

    Args:
        target: ``host:port`` of the runtime. Ignored when ``channel`` is given.
        timeout: Default deadline of unary calls, in seconds.
        metadata: gRPC metadata sent with every call.
        channel: A ready channel to use instead. The client does not close a channel it
            was given, and applies no security option (nor ``AGENTRT_*`` variable) to it.
        ca_file: PEM CA the server's certificate is checked against; turns TLS on
            (default ``$AGENTRT_CA``).
        cert_file: PEM client certificate for mTLS (default ``$AGENTRT_CERT``).
        key_file: Its PEM private key (default ``$AGENTRT_KEY``).
        token: Bearer token sent as ``authorization: Bearer ...`` (default ``$AGENTRT_TOKEN``).
            Over plaintext it is only sent to a loopback target.
        token_file: File whose first line is the token (default ``$AGENTRT_TOKEN_FILE``).
        server_name: Name the server's certificate must carry, when the target's host is not
            it (default ``$AGENTRT_SERVER_NAME``).
        tls: Force TLS on (system roots without ``ca_file``) or off (default ``$AGENTRT_TLS``;
            else on when a TLS file is given).

    Raises:
        CredentialsError: A TLS or token file cannot be used, or a token would travel in clear.
    """

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        metadata: Sequence[tuple[str, str]] = (),
        channel: grpc.aio.Channel | None = None,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        token: str | None = None,
        token_file: str | None = None,
        server_name: str | None = None,
        tls: bool | None = None,
    ) -> None:
        super().__init__(
            target,
            timeout=timeout,
            metadata=metadata,
            channel_given=channel is not None,
            ca_file=ca_file,
            cert_file=cert_file,
            key_file=key_file,
            token=token,
            token_file=token_file,
            server_name=server_name,
            tls=tls,
        )
        self._channel = (
            channel
            if channel is not None
            else self._open_channel(grpc.aio.secure_channel, grpc.aio.insecure_channel)
        )
        self._stub: AgentRuntimeServiceAsyncStub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(
            self._channel
        )

    async def close(self) -> None:
        """Closes the channel (if the client made it); in-flight calls are cancelled."""
        if self._owns_channel:
            await self._channel.close(None)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def run_agent(
        self,
        agent_name: str = "",
        input: str = "",
        *,
        agent: run_pb2.AgentSpec | None = None,
        budgets: run_pb2.Budgets | None = None,
        request_key: str = "",
        metadata: Mapping[str, str] | None = None,
        session_id: str = "",
        session_policy: str = "",
        timeout: float | None = None,
        detail: str = "",
    ) -> AsyncEventStream:
        """Starts a run (or attaches to the one ``request_key`` started) and streams its events.

        The stream ends when the run ends or pauses; closing it never cancels the run. A run that
        ends with cleanups the server's cleanup job still retries ends it with ``run.waiting``
        ``WAIT_REASON_CLEANUP`` right after ``run.ended`` (``tail_open``): the outcome does not
        wait for the job; ``stream_events(after_seq=..., follow=True)`` follows the rest.

        Args:
            agent_name: Name of an agent configured on the server.
            input: The user's input.
            agent: Inline agent definition; wins over ``agent_name``.
            budgets: Overrides of the agent's budgets.
            request_key: Idempotency key of the start.
            metadata: Caller metadata stored with the run.
            session_id: Session the run is a turn of.
            timeout: Deadline of the whole stream, in seconds; none by default.
            detail: Which events to send: "all" (the default), "milestones" (persisted events
                without the per-step noise: no ``model.text.delta``, ``step.started`` or
                ``run.checkpointed``) or "final" (only ``run.ended``, ``run.waiting`` and
                ``cleanup.settled``). The server leaves the others out, so seqs skip.

        Returns:
            An async iterator of the run's events.

        Raises:
            ValueError: ``detail`` is not one of those.
        """
        request = runtime_service_pb2.RunAgentRequest(
            **_start_fields(
                agent_name, input, agent, budgets, request_key, metadata, session_id, session_policy
            ),
            detail=_detail(detail),
            batch_events=True,  # fewer messages; an older server ignores it and sends one each
        )
        return AsyncEventStream(
            self._stub.RunAgent(request, timeout=timeout, metadata=self._metadata), hint=self._hint
        )

    async def start_run(
        self,
        agent_name: str = "",
        input: str = "",
        *,
        agent: run_pb2.AgentSpec | None = None,
        budgets: run_pb2.Budgets | None = None,
        request_key: str = "",
        metadata: Mapping[str, str] | None = None,
        session_id: str = "",
        session_policy: str = "",
    ) -> run_pb2.Run:
        """Starts a run (or returns the one ``request_key`` started) without streaming.

        Args:
            agent_name: Name of an agent configured on the server.
            input: The user's input.
            agent: Inline agent definition; wins over ``agent_name``.
            budgets: Overrides of the agent's budgets.
            request_key: Idempotency key of the start.
            metadata: Caller metadata stored with the run.
            session_id: Session the run is a turn of.

        Returns:
            The run as accepted.

        Raises:
            RPCError: The server refused (e.g. unknown agent: NOT_FOUND).
        """
        request = runtime_service_pb2.StartRunRequest(
            **_start_fields(
                agent_name, input, agent, budgets, request_key, metadata, session_id, session_policy
            )
        )
        response = await self._unary(
            self._stub.StartRun(request, timeout=self.timeout, metadata=self._metadata)
        )
        return response.run

    async def get_run(self, run_id: str) -> run_pb2.Run:
        """Returns one run.

        Args:
            run_id: The run's id.

        Raises:
            RPCError: NOT_FOUND when there is no such run.
        """
        request = runtime_service_pb2.GetRunRequest(run_id=run_id)
        response = await self._unary(
            self._stub.GetRun(request, timeout=self.timeout, metadata=self._metadata)
        )
        return response.run

    async def get_run_diagnostics(self, run_id: str) -> runtime_service_pb2.RunDiagnostics:
        """Returns why a run is where it is: its lease owner and expiry, fencing generation,
        faults and last error, pending calls with their attempts, reconcile schedule, cleanup
        status and trace id (the operator role).

        Args:
            run_id: The run's id.

        Raises:
            RPCError: NOT_FOUND when the caller's tenant has no such run; PERMISSION_DENIED
                without the operator (or admin) role.
        """
        request = runtime_service_pb2.GetRunDiagnosticsRequest(run_id=run_id)
        response = await self._unary(
            self._stub.GetRunDiagnostics(request, timeout=self.timeout, metadata=self._metadata)
        )
        return response.diagnostics

    async def list_runs(
        self,
        *,
        page_size: int = 50,
        page_token: str = "",
        phases: Sequence[run_pb2.RunPhase] = (),
        agent_name: str = "",
        session_id: str = "",
        needs_attention: bool = False,
        cleanup_unknown: bool = False,
    ) -> runtime_service_pb2.ListRunsResponse:
        """Lists runs, newest first.

        Args:
            page_size: At most this many runs (the server caps it).
            page_token: ``next_page_token`` of the previous page.
            phases: Only runs in these phases.
            agent_name: Only runs of this agent.
            session_id: Only runs of this session.
            needs_attention: Only runs whose wait was escalated (``Run.needs_attention``).
            cleanup_unknown: Only runs whose cleanups may have left a resource behind
                (``Run.cleanup_status`` UNKNOWN).

        Returns:
            The page: ``runs`` and ``next_page_token`` ("" on the last page).
        """
        request = _list_request(
            page_size, page_token, phases, agent_name, session_id, needs_attention, cleanup_unknown
        )
        return await self._unary(self._stub.ListRuns(request, timeout=self.timeout, metadata=self._metadata))

    def stream_events(
        self,
        run_id: str,
        *,
        after_seq: int = 0,
        follow: bool = False,
        timeout: float | None = None,
        cleanup_tail: bool = True,
        detail: str = "",
    ) -> AsyncEventStream:
        """Replays a run's persisted events after ``after_seq``, then (with ``follow``) tails live ones.

        Args:
            run_id: The run's id.
            after_seq: Only events with a greater seq (reconnect with the last seq seen).
            follow: Keep the stream open until the run ends and its log is complete: a run that
                ended with cleanups UNKNOWN is followed through its cleanup tail, until
                ``cleanup.settled`` (the cleanup job may take hours).
            timeout: Deadline of the whole stream, in seconds; none by default.
            cleanup_tail: With ``follow``, False stops the stream at the ``run.waiting``
                (``WAIT_REASON_CLEANUP``) that follows ``run.ended`` when the tail is open:
                for callers that want the run's outcome, not the cleanup job's records.
            detail: Which events to send: "all" (the default), "milestones" (persisted events
                without the per-step noise: no ``model.text.delta``, ``step.started`` or
                ``run.checkpointed``) or "final" (only ``run.ended``, ``run.waiting`` and
                ``cleanup.settled``). The server leaves the others out, so seqs skip.

        Returns:
            An async iterator of the events; ``tail_open`` says whether the run's cleanup tail was
            still open where it ended.

        Raises:
            ValueError: ``detail`` is not one of those.
        """
        request = runtime_service_pb2.StreamRunEventsRequest(
            run_id=run_id,
            after_seq=after_seq,
            follow=follow,
            detail=_detail(detail),
            batch_events=True,
        )
        return AsyncEventStream(
            self._stub.StreamRunEvents(request, timeout=timeout, metadata=self._metadata),
            hint=self._hint,
            cleanup_tail=cleanup_tail,
        )

    async def get_payload(self, run_id: str, payload_id: str, *, deadline_s: float | None = None) -> Payload:
        """Fetches a payload of a run (a large tool result, output or input) whole.

        Args:
            run_id: The run's id.
            payload_id: ``payload_id`` of a PayloadRef in one of the run's events.
            deadline_s: Deadline of the whole transfer, in seconds; none by default.

        Raises:
            RPCError: NOT_FOUND when the run has no such payload (or is another tenant's),
                INVALID_ARGUMENT for a malformed id.
            PayloadMismatch: The bytes received do not match the payload's size and sha256.
        """
        request = runtime_service_pb2.GetPayloadRequest(run_id=run_id, payload_id=payload_id)
        call = self._stub.GetPayload(request, timeout=deadline_s, metadata=self._metadata)
        try:
            return await assemble_async(call)
        except grpc.aio.AioRpcError as exc:
            raise await _errors.from_aio_call(call, exc, hint=self._hint) from exc

    async def cancel_run(self, run_id: str, *, reason: str = "") -> run_pb2.Run:
        """Asks a run to stop. Cancellation is not rollback.

        Args:
            run_id: The run's id.
            reason: Why, recorded with the run.

        Returns:
            The run after the request was recorded.
        """
        request = runtime_service_pb2.CancelRunRequest(run_id=run_id, reason=reason)
        response = await self._unary(
            self._stub.CancelRun(request, timeout=self.timeout, metadata=self._metadata)
        )
        return response.run

    async def resolve_approval(
        self,
        run_id: str,
        approval_id: str,
        *,
        approve: bool,
        args_hash: str,
        expected_revision: int,
        comment: str = "",
        override_intent: bool = False,
    ) -> run_pb2.Run:
        """Approves or rejects a call waiting for a person.

        Args:
            run_id: The run's id.
            approval_id: From the ``approval.requested`` event.
            approve: True to run the call, False to reject it.
            args_hash: The ``args_hash`` of the arguments the approver saw.
            expected_revision: The run revision the approver saw.
            comment: Free text.
            override_intent: Run the approved call even if it repeats the business intent of an
                earlier call (its tool host would otherwise answer with that call's result).

        Returns:
            The run after the decision was recorded.

        Raises:
            RPCError: e.g. FAILED_PRECONDITION or ABORTED when the run moved on.
        """
        request = _resolve_request(
            run_id, approval_id, approve, args_hash, expected_revision, comment, override_intent
        )
        response = await self._unary(
            self._stub.ResolveApproval(request, timeout=self.timeout, metadata=self._metadata)
        )
        return response.run

    async def resolve_outcome(
        self,
        run_id: str,
        call_id: str,
        *,
        decision: str,
        expected_revision: int,
        result_json: str = "",
        comment: str = "",
    ) -> run_pb2.Run:
        """Settles a run in UNKNOWN_OUTCOME: ``decision`` is "succeeded", "failed" or "retry".

        Raises:
            RPCError: FAILED_PRECONDITION when the run is not in UNKNOWN_OUTCOME, ABORTED when it moved on.
        """
        request = _outcome_request(run_id, call_id, decision, expected_revision, result_json, comment)
        response = await self._unary(
            self._stub.ResolveOutcome(request, timeout=self.timeout, metadata=self._metadata)
        )
        return response.run

    async def _unary(self, call: grpc.aio.UnaryUnaryCall[Any, _R]) -> _R:
        try:
            return await call
        except grpc.aio.AioRpcError as exc:
            raise await _errors.from_aio_call(call, exc, hint=self._hint) from exc
