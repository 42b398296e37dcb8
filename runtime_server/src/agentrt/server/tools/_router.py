"""Client side of the tool host contract: which host serves which tool, and one call.

Channel-level retries are off: the runtime's tool scheduler is the one owner of
tool retries (R6.3). Every call carries its deadline and the R3.3 metadata, and,
when the router has a signer, a call grant binding that metadata to the tool and
the exact arguments text sent: the host obeys nothing else (R3.3).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import grpc
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from google.protobuf import json_format

from agentrt.proto.toolhost.v1 import tool_host_service_pb2 as svc
from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.server.core import connect_timeout_s
from agentrt.server.tools._channel import TLS_CHECK_S, HostChannel, HostTls
from agentrt.server.tools._slots import SlotTimeout, ToolSlots
from agentrt.toolhost.metadata import call_metadata_pairs
from agentrt.toolhost.security import GRANT_HEADER, GrantSigner, TlsFileError, key_id

_log = logging.getLogger("agentrt.tools")

DEFAULT_MAX_RESULT_BYTES = 64 * 1024 * 1024
# Room around a result at its maximum: the response's framing, an error's message and details.
RESPONSE_OVERHEAD_BYTES = 1024 * 1024


class ToolHostError(Exception):
    """A tool host could not be reached or answered badly at startup."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CallMetadata:
    """What travels with a call (R3.3); ``tenant_id`` only inside its grant, never as a header."""

    idempotency_key: str
    run_id: str
    call_id: str
    attempt: int
    fencing_token: int
    tenant_id: str = ""
    traceparent: str = ""
    max_result_bytes: int = 0  # the host refuses a larger result itself (0: its own default)
    session_id: str = ""  # the run's session: scopes session-wide intent keys
    intent_override: bool = False  # a person approved repeating an earlier call's intent

    def pairs(self) -> tuple[tuple[str, str], ...]:
        return call_metadata_pairs(
            idempotency_key=self.idempotency_key,
            run_id=self.run_id,
            call_id=self.call_id,
            attempt=self.attempt,
            fencing_token=self.fencing_token,
            max_result_bytes=self.max_result_bytes,
            session_id=self.session_id,
            intent_override=self.intent_override,
            traceparent=self.traceparent,
        )


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """Result JSON or a typed error (proto3 JSON shape of ToolError)."""

    result_json: str | None
    error: dict[str, str] | None
    replayed: bool = False
    # Whether the call took effect is not known: the transport failed after the request may have
    # left, or the host says the tool is still running or was stopped where it stood. A write
    # must be looked up (and reconciled) before it is sent again.
    in_doubt: bool = False
    # Set when the result is stored as a payload: its reference (proto3 JSON of PayloadRef), and
    # whether result_json is a truncated view of it.
    result_ref: dict[str, Any] | None = None
    truncated: bool = False
    # The host answered with an earlier call's result (same business intent); proto3 JSON of
    # IntentDuplicate, naming that call.
    deduplicated: bool = False
    duplicate_of: dict[str, Any] | None = None
    host: str = ""  # the configured name of the tool host that answered, when one did
    # A large result's members addressed to the runtime (``_cleanup``, ``_set_variables``) as a
    # JSON object, kept when result_json became a view of the payload (or a refusal) without them.
    runtime_json: str | None = None

    @classmethod
    def failure(cls, code: str, message: str, *, in_doubt: bool = False) -> ToolOutcome:
        return cls(None, {"code": f"TOOL_ERROR_CODE_{code}", "message": message}, in_doubt=in_doubt)


class ToolRouter:
    """Knows every configured tool host and routes calls by tool name.

    Args:
        signer: Signs a call grant for every InvokeTool, GetOperation and PreviewTool;
            None sends none (``grants.enabled = false``; only hosts without grant keys obey).
        tls_check_s: Seconds between looks at TLS files (and at the signing key, for the log).
        slots: Per-tool concurrency limits (none by default).
        connect_s: How long a call waits for a connection to its host (``[timeouts] connect_s``);
            past it the call fails TRANSIENT, provably unsent, so a write is sent again under its key.
    """

    def __init__(
        self,
        *,
        signer: GrantSigner | None = None,
        tls_check_s: float = TLS_CHECK_S,
        slots: ToolSlots | None = None,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        connect_s: float = 5.0,
    ) -> None:
        self.signer = signer
        self.connect_s = connect_s
        self.slots = slots or ToolSlots()
        self.max_result_bytes = max_result_bytes
        self._tls_check_s = tls_check_s
        self._hosts: dict[str, HostChannel] = {}
        self._specs: dict[str, tuple[tool_pb2.ToolSpec, HostChannel]] = {}
        self._signing_kid = ""
        self._kid_checked = 0.0
        self._host_signers: dict[str, GrantSigner] = {}

    async def add_host(
        self,
        name: str,
        address: str,
        *,
        tls: HostTls | None = None,
        signer: GrantSigner | None = None,
        timeout_s: float = 10.0,
    ) -> list[str]:
        """Connect to a host (over mTLS when ``tls`` is given) and learn its tools.

        ``signer`` signs this host's grants instead of the router's: a host the runtime spawned
        trusts a key of its own, which lives as long as the child and never needs rotating.

        Raises:
            ToolHostError: unreachable host, unusable TLS files, a failed TLS handshake, or a tool
                name another host already serves.
        """
        try:
            host = HostChannel(
                name=name,
                address=address,
                tls=tls,
                check_every_s=self._tls_check_s,
                max_receive_bytes=self.max_result_bytes + RESPONSE_OVERHEAD_BYTES,
            )
        except TlsFileError as exc:
            raise ToolHostError(f"tool host {name!r}: {exc}") from exc
        try:
            listed = await host.stub().ListTools(
                svc.ListToolsRequest(), timeout=timeout_s, wait_for_ready=True
            )
        except grpc.aio.AioRpcError as exc:
            detail = f"{exc.code().name} {exc.details()}"
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                detail += await _last_connect_error(host)
            await host.close()
            secured = "over mTLS " if tls is not None else ""
            raise ToolHostError(
                f"tool host {name!r} at {address} did not answer ListTools {secured}within {timeout_s:g}s: "
                f"{detail}"
            ) from exc
        for spec in listed.tools:
            if spec.name in self._specs:
                await host.close()
                other = self._specs[spec.name][1].name
                raise ToolHostError(f"tool {spec.name!r} is served by both {other!r} and {name!r}")
        self._hosts[name] = host
        if signer is not None:
            self._host_signers[name] = signer
        for spec in listed.tools:
            self._specs[spec.name] = (spec, host)
        return [spec.name for spec in listed.tools]

    def spec(self, tool: str) -> tool_pb2.ToolSpec | None:
        found = self._specs.get(tool)
        return found[0] if found else None

    def host_of(self, tool: str) -> str:
        """The configured name of the tool host serving ``tool``; "" when none does."""
        found = self._specs.get(tool)
        return found[1].name if found is not None else ""

    def tool_names(self) -> list[str]:
        return sorted(self._specs)

    def _metadata(
        self, host: HostChannel, tool: str, arguments_json: str, metadata: CallMetadata
    ) -> tuple[tuple[str, str], ...]:
        """The call's metadata, with a fresh grant for exactly this tool and arguments text."""
        pairs = metadata.pairs()
        signer = self._host_signers.get(host.name, self.signer)
        if signer is None:
            return pairs
        if signer is self.signer:
            self._note_signing_key(signer)
        grant = signer.sign(
            tenant=metadata.tenant_id,
            run_id=metadata.run_id,
            call_id=metadata.call_id,
            idempotency_key=metadata.idempotency_key,
            fencing_token=metadata.fencing_token,
            tool=tool,
            arguments_json=arguments_json,
            session_id=metadata.session_id,
            intent_override=metadata.intent_override,
        )
        return (*pairs, (GRANT_HEADER, grant))

    def _note_signing_key(self, signer: GrantSigner) -> None:
        # Operators rotating the signing key file learn from the log when the new key is in use.
        now = time.monotonic()
        if now - self._kid_checked < self._tls_check_s:
            return
        self._kid_checked = now
        public = serialization.load_pem_public_key(signer.public_key_pem)
        assert isinstance(public, Ed25519PublicKey)
        kid = key_id(public)
        if kid != self._signing_kid:
            if self._signing_kid:
                _log.info("call grants are now signed with key %s (was %s)", kid, self._signing_kid)
            self._signing_kid = kid

    async def invoke(
        self, tool: str, arguments_json: str, *, metadata: CallMetadata, timeout_s: float
    ) -> ToolOutcome:
        """Send one call. Transport failures become typed outcomes; cancellation propagates.

        Past the tool's concurrency limit the call first waits for a slot, within ``timeout_s``;
        with none free in time it fails TRANSIENT, never sent.
        """
        found = self._specs.get(tool)
        if found is None:
            return ToolOutcome.failure("UNKNOWN_TOOL", f"no configured tool host serves {tool!r}")
        spec, host = found
        limit = self.slots.limit(tool, spec)
        if not limit:
            return await self._invoke(host, tool, arguments_json, metadata=metadata, timeout_s=timeout_s)
        try:
            async with self.slots.hold(tool, limit, timeout_s) as waited:
                left = timeout_s - waited
                return await self._invoke(host, tool, arguments_json, metadata=metadata, timeout_s=left)
        except SlotTimeout as exc:
            return ToolOutcome.failure("TRANSIENT", f"deadline exceeded: {exc}")

    async def _invoke(
        self, host: HostChannel, tool: str, arguments_json: str, *, metadata: CallMetadata, timeout_s: float
    ) -> ToolOutcome:
        stub = host.stub()  # first: it may move the host to a new channel (rotated TLS files)
        began = time.monotonic()
        connect_s = connect_timeout_s(connect_s=self.connect_s, call_timeout_s=timeout_s)
        if not await host.connected(connect_s):
            return ToolOutcome.failure(
                "TRANSIENT",
                f"tool host UNAVAILABLE: failed to connect to {host.name!r} within {connect_s:g}s; not sent",
                in_doubt=False,
            )
        left = max(0.0, timeout_s - (time.monotonic() - began))
        try:
            reply = await stub.InvokeTool(
                svc.InvokeToolRequest(tool=tool, arguments_json=arguments_json),
                timeout=left,
                metadata=self._metadata(host, tool, arguments_json, metadata),
            )
        except grpc.aio.AioRpcError as exc:
            return _transport_failure(exc)
        if reply.WhichOneof("outcome") == "error":
            error = json_format.MessageToDict(reply.error, preserving_proto_field_name=True)
            return ToolOutcome(None, error, reply.replayed, in_doubt=host_unsure(reply.error))
        if reply.deduplicated:
            first = json_format.MessageToDict(reply.duplicate_of, preserving_proto_field_name=True)
            return ToolOutcome(reply.result_json, None, reply.replayed, deduplicated=True, duplicate_of=first)
        return ToolOutcome(reply.result_json, None, reply.replayed)

    async def cancel_operation(
        self, tool: str, arguments_json: str, *, metadata: CallMetadata, reason: str, timeout_s: float
    ) -> bool:
        """Ask the call's tool host to stop it (an explicit cancel, never a vanished caller).

        Returns:
            True when the host was running the call and signalled it.

        Raises:
            grpc.aio.AioRpcError: the host could not be asked (unreachable, deadline, no such key).
        """
        found = self._specs.get(tool)
        if found is None:
            return False
        host = found[1]
        reply = await host.stub().CancelOperation(
            svc.CancelOperationRequest(idempotency_key=metadata.idempotency_key, reason=reason[:1000]),
            timeout=timeout_s,
            metadata=self._metadata(host, tool, arguments_json, metadata),
        )
        return reply.signalled

    async def get_operation(
        self, tool: str, arguments_json: str, *, metadata: CallMetadata, timeout_s: float
    ) -> tool_pb2.Operation | None:
        """The host's ledger entry for the call's idempotency key; None when the host has none.

        Raises:
            grpc.aio.AioRpcError: the host could not answer (unreachable, deadline, refused grant).
        """
        found = self._specs.get(tool)
        if found is None:
            return None
        host = found[1]
        try:
            reply = await host.stub().GetOperation(
                svc.GetOperationRequest(idempotency_key=metadata.idempotency_key),
                timeout=timeout_s,
                metadata=self._metadata(host, tool, arguments_json, metadata),
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise
        return reply.operation

    async def preview(
        self, tool: str, arguments_json: str, *, metadata: CallMetadata, timeout_s: float
    ) -> str:
        """The tool host's impact summary for approvers; a plain fallback when it cannot give one."""
        found = self._specs.get(tool)
        if found is None:
            return f"{tool} is not served by any tool host"
        host = found[1]
        try:
            reply = await host.stub().PreviewTool(
                svc.PreviewToolRequest(tool=tool, arguments_json=arguments_json),
                timeout=timeout_s,
                metadata=self._metadata(host, tool, arguments_json, metadata),
            )
        except grpc.aio.AioRpcError as exc:
            return f"Would call {tool} with {arguments_json} (no preview: {exc.code().name})"
        return str(reply.impact_summary)

    async def close(self) -> None:
        for host in self._hosts.values():
            await host.close()
        self._hosts.clear()
        self._specs.clear()


async def _last_connect_error(host: HostChannel) -> str:
    """Why the channel cannot connect (a refused port, a failed TLS handshake), asked without waiting."""
    try:
        await host.stub().ListTools(svc.ListToolsRequest(), timeout=2.0)
    except grpc.aio.AioRpcError as exc:
        return f" ({exc.details()})"
    return ""


def host_unsure(error: tool_pb2.ToolError) -> bool:
    """The host's own word that it cannot say whether the call took effect (see ToolError.details_json):
    the tool is still running, or the host stopped it where it stood."""
    if not error.details_json or error.code not in _MAY_BE_UNSURE:
        return False
    try:
        details = json.loads(error.details_json)
    except ValueError:
        return False
    return isinstance(details, dict) and (
        details.get("still_running") is True or details.get("effect") == "unknown"
    )


_MAY_BE_UNSURE = (tool_pb2.TOOL_ERROR_CODE_TRANSIENT, tool_pb2.TOOL_ERROR_CODE_CANCELLED)

# gRPC fails a call this way when no connection to the host could be made: the call was never
# given to a transport, so the request provably never left.
_NEVER_CONNECTED = "failed to connect"


def _transport_failure(exc: grpc.aio.AioRpcError) -> ToolOutcome:
    code = exc.code()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return ToolOutcome.failure("TRANSIENT", "deadline exceeded before the tool answered", in_doubt=True)
    if code == grpc.StatusCode.UNAVAILABLE:
        # Any other UNAVAILABLE (a connection reset, a host gone mid-call) may follow the request.
        unsent = _NEVER_CONNECTED in (exc.details() or "").lower()
        return ToolOutcome.failure(
            "TRANSIENT", f"tool host UNAVAILABLE: {exc.details()}", in_doubt=not unsent
        )
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in (exc.details() or ""):
        # The host sent a result past the channel's limit (it did not enforce the maximum itself):
        # sending again would bring the same result back.
        return ToolOutcome.failure("RESULT_TOO_LARGE", "the tool's result is larger than the maximum")
    if code in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ABORTED):
        return ToolOutcome.failure("TRANSIENT", f"tool host {code.name}: {exc.details()}")
    if code == grpc.StatusCode.CANCELLED:
        return ToolOutcome.failure("CANCELLED", "call cancelled")
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return ToolOutcome.failure("INVALID_INPUT", exc.details() or "invalid call")
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        # The host does not trust this runtime's grants: a configuration error, never the model's.
        _log.error("a tool host refused the runtime's call grant: %s %s", code.name, exc.details())
    return ToolOutcome.failure("PERMANENT", f"tool host {code.name}: {exc.details()}")


def tool_result_text(outcome: ToolOutcome) -> str:
    """What the model sees for an outcome."""
    if outcome.result_json is not None:
        return outcome.result_json
    return json.dumps(outcome.error or {})
