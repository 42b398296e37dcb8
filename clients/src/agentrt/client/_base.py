"""What the asyncio and the synchronous client share (httpx's ``BaseClient`` is the model): the
target and default deadline, the credentials, TLS and channel options resolved from options and
``AGENTRT_*`` variables, the metadata of every call, and the requests both send."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeVar, cast

from agentrt.client._credentials import ChannelSecurity, resolve_security
from agentrt.client._errors import CredentialsError
from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2

_Channel = TypeVar("_Channel")


def default_target() -> str:
    """Returns ``$AGENTRT_TARGET``, or ``127.0.0.1:50051`` when it is unset or empty."""
    return os.environ.get("AGENTRT_TARGET") or "127.0.0.1:50051"


DEFAULT_TARGET: Final[str] = default_target()
"""Where clients connect by default: ``$AGENTRT_TARGET`` or ``127.0.0.1:50051``."""

DEFAULT_TIMEOUT: Final[float] = 10.0
"""Seconds a unary call may take unless the client or the call says otherwise."""


def _metadata_tuple(metadata: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple((k.lower(), v) for k, v in metadata)


def _security(
    target: str, *, channel_given: bool, metadata: tuple[tuple[str, str], ...], **options: Any
) -> ChannelSecurity:
    if channel_given:
        # A ready channel carries its own credentials; the environment's are not applied to it.
        given = sorted(name for name, value in options.items() if value is not None)
        if given:
            raise CredentialsError(f"{', '.join(given)} cannot be combined with a ready channel")
        return ChannelSecurity(target=target)
    security = resolve_security(target, **options)
    if security.token and any(k == "authorization" for k, _ in metadata):
        raise CredentialsError("give the token or an authorization metadata entry, not both")
    return security


def _start_fields(
    agent_name: str,
    input: str,
    agent: run_pb2.AgentSpec | None,
    budgets: run_pb2.Budgets | None,
    request_key: str,
    metadata: Mapping[str, str] | None,
    session_id: str,
    session_policy: str = "",
) -> dict[str, Any]:
    # RunAgentRequest and StartRunRequest have the same fields.
    fields: dict[str, Any] = {
        "agent_name": agent_name,
        "input": input,
        "agent": agent,
        "budgets": budgets,
        "request_key": request_key,
        "metadata": dict(metadata or {}),
        "session_id": session_id,
    }
    if session_policy:  # "reject" | "enqueue" | "interrupt"
        fields["session_policy"] = f"SESSION_POLICY_{session_policy.upper()}"
    return fields


DETAILS: Final = ("all", "milestones", "final")


def _detail(detail: str) -> runtime_service_pb2.EventDetail:
    """A stream's ``detail`` ("" or one of :data:`DETAILS`) as its EventDetail value."""
    if detail and detail not in DETAILS:
        raise ValueError(f"detail must be one of {', '.join(DETAILS)}, not {detail!r}")
    value = runtime_service_pb2.EventDetail.Value(f"EVENT_DETAIL_{(detail or 'unspecified').upper()}")
    return cast("runtime_service_pb2.EventDetail", value)


def _list_request(
    page_size: int,
    page_token: str,
    phases: Sequence[run_pb2.RunPhase],
    agent_name: str,
    session_id: str,
    needs_attention: bool = False,
    cleanup_unknown: bool = False,
) -> runtime_service_pb2.ListRunsRequest:
    return runtime_service_pb2.ListRunsRequest(
        page_size=page_size,
        page_token=page_token,
        phases=list(phases),
        agent_name=agent_name,
        session_id=session_id,
        needs_attention=needs_attention,
        cleanup_unknown=cleanup_unknown,
    )


def _outcome_request(
    run_id: str, call_id: str, decision: str, expected_revision: int, result_json: str, comment: str
) -> runtime_service_pb2.ResolveOutcomeRequest:
    return runtime_service_pb2.ResolveOutcomeRequest(
        run_id=run_id,
        call_id=call_id,
        decision=f"OUTCOME_DECISION_{decision.upper()}",
        result_json=result_json,
        expected_revision=expected_revision,
        comment=comment,
    )


def _resolve_request(
    run_id: str,
    approval_id: str,
    approve: bool,
    args_hash: str,
    expected_revision: int,
    comment: str,
    override_intent: bool = False,
) -> runtime_service_pb2.ResolveApprovalRequest:
    decision = run_pb2.APPROVAL_DECISION_APPROVE if approve else run_pb2.APPROVAL_DECISION_REJECT
    return runtime_service_pb2.ResolveApprovalRequest(
        run_id=run_id,
        approval_id=approval_id,
        decision=decision,
        args_hash=args_hash,
        expected_revision=expected_revision,
        comment=comment,
        override_intent=override_intent,
    )


class BaseClient:
    """The constructor both clients share; see :class:`~agentrt.client.AsyncClient` for the arguments.

    Args:
        channel_given: A ready channel will be used: no security option (nor ``AGENTRT_*``
            variable) applies to it, and the client does not close it.

    Raises:
        CredentialsError: A TLS or token file cannot be used, a token would travel in clear, or
            security options come with a ready channel.
    """

    def __init__(
        self,
        target: str,
        *,
        timeout: float,
        metadata: Sequence[tuple[str, str]],
        channel_given: bool,
        ca_file: str | None,
        cert_file: str | None,
        key_file: str | None,
        token: str | None,
        token_file: str | None,
        server_name: str | None,
        tls: bool | None,
    ) -> None:
        self.target = target
        self.timeout = timeout
        extra = _metadata_tuple(metadata)
        security = _security(
            target,
            channel_given=channel_given,
            metadata=extra,
            ca_file=ca_file,
            cert_file=cert_file,
            key_file=key_file,
            token=token,
            token_file=token_file,
            server_name=server_name,
            tls=tls,
        )
        self._channel_security = security
        self._security = security.describe()
        # Hints name this client's options; a channel made elsewhere gets none.
        self._hint = None if channel_given else security.hint
        self._metadata = extra + security.call_metadata()
        self._owns_channel = not channel_given

    def _open_channel(self, secure: Callable[..., _Channel], insecure: Callable[[str], _Channel]) -> _Channel:
        """A channel to the target with this client's credentials (``grpc`` or ``grpc.aio`` makers)."""
        credentials = self._channel_security.channel_credentials()
        if credentials is None:
            return insecure(self.target)
        return secure(self.target, credentials, options=self._channel_security.channel_options())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(target={self.target!r}, security={self._security!r})"
