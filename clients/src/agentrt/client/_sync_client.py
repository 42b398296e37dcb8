"""The synchronous client of ``agentrt.runtime.v1.AgentRuntimeService``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Self

import grpc

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
)
from agentrt.client._payloads import Payload, assemble
from agentrt.client._streams import EventStream
from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2, runtime_service_pb2_grpc


class Client(BaseClient):
    """Synchronous client of the agentrt runtime; the same API as :class:`AsyncClient`.

    Example::

        with Client() as client:
            for event in client.run_agent("refund-demo", "Refund order A100"):
                print(format_event(event))

    Args:
        target: ``host:port`` of the runtime. Ignored when ``channel`` is given.
        timeout: Default deadline of unary calls, in seconds.
        metadata: gRPC metadata sent with every call.
        channel: A ready channel to use instead. The client does not close a channel it
            was given, and applies no security option (nor ``AGENTRT_*`` variable) to it.
        ca_file, cert_file, key_file, token, token_file, server_name, tls: Security options,
            as in :class:`AsyncClient`; None takes the ``AGENTRT_*`` variable.

    Raises:
        CredentialsError: A TLS or token file cannot be used, or a token would travel in clear.
    """

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        metadata: Sequence[tuple[str, str]] = (),
        channel: grpc.Channel | None = None,
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
            channel if channel is not None else self._open_channel(grpc.secure_channel, grpc.insecure_channel)
        )
        self._stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(self._channel)

    def close(self) -> None:
        """Closes the channel (if the client made it); in-flight calls are cancelled."""
        if self._owns_channel:
            self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

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
    ) -> EventStream:
        """Starts a run and streams its events; see :meth:`AsyncClient.run_agent`."""
        request = runtime_service_pb2.RunAgentRequest(
            **_start_fields(
                agent_name, input, agent, budgets, request_key, metadata, session_id, session_policy
            ),
            detail=_detail(detail),
            batch_events=True,  # fewer messages; an older server ignores it and sends one each
        )
        return EventStream(
            self._stub.RunAgent(request, timeout=timeout, metadata=self._metadata), hint=self._hint
        )

    def start_run(
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
        """Starts a run without streaming; see :meth:`AsyncClient.start_run`."""
        request = runtime_service_pb2.StartRunRequest(
            **_start_fields(
                agent_name, input, agent, budgets, request_key, metadata, session_id, session_policy
            )
        )
        try:
            return self._stub.StartRun(request, timeout=self.timeout, metadata=self._metadata).run
        except grpc.RpcError as exc:
            raise _errors.from_call(exc, hint=self._hint) from exc

    def get_run(self, run_id: str) -> run_pb2.Run:
        """Returns one run; see :meth:`AsyncClient.get_run`."""
        request = runtime_service_pb2.GetRunRequest(run_id=run_id)
        try:
            return self._stub.GetRun(request, timeout=self.timeout, metadata=self._metadata).run
        except grpc.RpcError as exc:
            raise _errors.from_call(exc, hint=self._hint) from exc

    def get_run_diagnostics(self, run_id: str) -> runtime_service_pb2.RunDiagnostics:
        """Returns why a run is where it is; see :meth:`AsyncClient.get_run_diagnostics`."""
        request = runtime_service_pb2.GetRunDiagnosticsRequest(run_id=run_id)
        try:
            response = self._stub.GetRunDiagnostics(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise _errors.from_call(exc, hint=self._hint) from exc
        return response.diagnostics

    def list_runs(
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
        """Lists runs, newest first; see :meth:`AsyncClient.list_runs`."""
        request = _list_request(
            page_size, page_token, phases, agent_name, session_id, needs_attention, cleanup_unknown
        )
        try:
            return self._stub.ListRuns(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise _errors.from_call(exc, hint=self._hint) from exc

    def stream_events(
        self,
        run_id: str,
        *,
        after_seq: int = 0,
        follow: bool = False,
        timeout: float | None = None,
        cleanup_tail: bool = True,
        detail: str = "",
    ) -> EventStream:
        """Replays (and with ``follow`` tails) a run's events; see :meth:`AsyncClient.stream_events`."""
        request = runtime_service_pb2.StreamRunEventsRequest(
            run_id=run_id,
            after_seq=after_seq,
            follow=follow,
            detail=_detail(detail),
            batch_events=True,
        )
        return EventStream(
            self._stub.StreamRunEvents(request, timeout=timeout, metadata=self._metadata),
            hint=self._hint,
            cleanup_tail=cleanup_tail,
        )

    def get_payload(self, run_id: str, payload_id: str, *, deadline_s: float | None = None) -> Payload:
        """Fetches a payload of a run whole; see :meth:`AsyncClient.get_payload`."""
        request = runtime_service_pb2.GetPayloadRequest(run_id=run_id, payload_id=payload_id)
        try:
            return assemble(self._stub.GetPayload(request, timeout=deadline_s, metadata=self._metadata))
        except grpc.RpcError as exc:
            raise _errors.from_call(exc, hint=self._hint) from exc

    def cancel_run(self, run_id: str, *, reason: str = "") -> run_pb2.Run:
        """Asks a run to stop; see :meth:`AsyncClient.cancel_run`."""
        request = runtime_service_pb2.CancelRunRequest(run_id=run_id, reason=reason)
        try:
            return self._stub.CancelRun(request, timeout=self.timeout, metadata=self._metadata).run
        except grpc.RpcError as exc:
            raise _errors.from_call(exc, hint=self._hint) from exc

    def resolve_approval(
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
        """Approves or rejects a call waiting for a person; see :meth:`AsyncClient.resolve_approval`."""
        request = _resolve_request(
            run_id, approval_id, approve, args_hash, expected_revision, comment, override_intent
        )
        try:
            return self._stub.ResolveApproval(request, timeout=self.timeout, metadata=self._metadata).run
        except grpc.RpcError as exc:
            raise _errors.from_call(exc, hint=self._hint) from exc

    def resolve_outcome(
        self,
        run_id: str,
        call_id: str,
        *,
        decision: str,
        expected_revision: int,
        result_json: str = "",
        comment: str = "",
    ) -> run_pb2.Run:
        """Settles a run in UNKNOWN_OUTCOME; see :meth:`AsyncClient.resolve_outcome`."""
        request = _outcome_request(run_id, call_id, decision, expected_revision, result_json, comment)
        try:
            return self._stub.ResolveOutcome(request, timeout=self.timeout, metadata=self._metadata).run
        except grpc.RpcError as exc:
            raise _errors.from_call(exc, hint=self._hint) from exc
