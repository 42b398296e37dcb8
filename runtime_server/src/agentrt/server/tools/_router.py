"""Client side of the tool host contract: which host serves which tool, and one call.

Channel-level retries are off: the runtime's tool scheduler is the one owner of
tool retries (R6.3). Every call carries its deadline and the R3.3 metadata, and,
when the router has a signer, a call grant binding that metadata to the tool and
the exact arguments text sent: the host obeys nothing else (R3.3).

Hosts come and go: a host added with :meth:`ToolRouter.watch_host` need not be up. Its tools
are learned when it answers ListTools (a :class:`HostWatcher` asks when it (re)appears, every
``relist_s``, and with a backoff while it does not answer), and dropped when a later listing
no longer has them. While a host has never answered, the tools the configuration names that no
host serves are *pending*: a call to one waits for it within the connect layer's time, then
fails TRANSIENT and provably unsent, so the tool scheduler retries it by the retry policy. (The
engine holds a new call of a pending tool before it starts, until its spec is known:
``engine/_pending_tools.py``.)
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import grpc
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from google.protobuf import json_format
from google.protobuf.message import DecodeError

# googleapis-common-protos ships no type information.
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]

from agentrt.proto.toolhost.v1 import tool_host_service_pb2 as svc
from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.server.core import (
    LedgerSilence,
    LedgerWord,
    ToolError,
    ToolErrorCode,
    ToolOutcome,
    connect_timeout_s,
    tool_hosts,
)
from agentrt.server.telemetry import Counters
from agentrt.server.tools._channel import TLS_CHECK_S, HostChannel, HostTls
from agentrt.server.tools._routes import ToolRoutes
from agentrt.server.tools._slots import SlotTimeout, ToolSlots
from agentrt.server.tools._watcher import list_tools, rpc_error_text
from agentrt.toolhost.metadata import call_metadata_pairs
from agentrt.toolhost.security import GRANT_HEADER, GrantSigner, TlsFileError, key_id

if TYPE_CHECKING:
    from agentrt.proto.toolhost.v1.tool_host_service_pb2_grpc import ToolHostServiceAsyncStub

_log = logging.getLogger("agentrt.tools")

DEFAULT_MAX_RESULT_BYTES = 64 * 1024 * 1024
# Room around a result at its maximum: the response's framing, an error's message and details.
RESPONSE_OVERHEAD_BYTES = 1024 * 1024


class ToolHostError(Exception):
    """A tool host could not be reached or answered badly at startup."""


class ToolHostUnreachable(Exception):
    """No connection to a tool host could be made within the connect layer's time."""


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
        counters: Counters | None = None,
    ) -> None:
        self.signer = signer
        self.connect_s = connect_s
        self.slots = slots or ToolSlots()
        self.max_result_bytes = max_result_bytes
        self.routes = ToolRoutes(counters=counters or Counters())
        self._tls_check_s = tls_check_s
        self._signing_kid = ""
        self._kid_checked = 0.0
        self._host_signers: dict[str, GrantSigner] = {}

    def open_host(
        self, name: str, target: str, *, tls: HostTls | None = None, pooled: bool = False
    ) -> HostChannel:
        """A channel to a host (or pool), not yet connected nor added: nothing is sent.

        Raises:
            ToolHostError: unusable TLS files.
        """
        try:
            return HostChannel(
                name=name,
                address=target,
                tls=tls,
                check_every_s=self._tls_check_s,
                max_receive_bytes=self.max_result_bytes + RESPONSE_OVERHEAD_BYTES,
                pooled=pooled,
            )
        except TlsFileError as exc:
            raise ToolHostError(f"tool host {name!r}: {exc}") from exc

    async def add_host(
        self,
        name: str,
        address: str,
        *,
        tls: HostTls | None = None,
        signer: GrantSigner | None = None,
        timeout_s: float = 10.0,
    ) -> list[str]:
        """Connect to a host (over mTLS when ``tls`` is given) and learn its tools, once, now.

        ``signer`` signs this host's grants instead of the router's: a host the runtime spawned
        trusts a key of its own, which lives as long as the child and never needs rotating.

        Raises:
            ToolHostError: unreachable host, unusable TLS files, a failed TLS handshake, or a tool
                name another host already serves.
        """
        host = self.open_host(name, address, tls=tls)
        try:
            listed = await list_tools(host, timeout_s=timeout_s, wait_for_ready=True)
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
        for spec in listed:
            if (found := self.routes.find(spec.name)) is not None:
                await host.close()
                other = found[1].name
                raise ToolHostError(f"tool {spec.name!r} is served by both {other!r} and {name!r}")
        self._register(host, signer)
        self.routes.learn(name, listed, "first")
        return [spec.name for spec in listed]

    async def watch_host(
        self,
        host: HostChannel,
        *,
        signer: GrantSigner | None = None,
        first_wait_s: float = 10.0,
        policy: tool_hosts.RelistPolicy | None = None,
    ) -> list[str]:
        """Add a host that need not be up (see :meth:`open_host`): list it now, then keep it listed.

        A host that refuses the connection is not waited for: its tools are learned when it
        answers. One that lets the connection hang is waited for up to ``first_wait_s``.

        Returns:
            The tools it serves now ([] when it did not answer).
        """
        self._register(host, signer)
        listed: list[tool_pb2.ToolSpec] | None = None
        error = ""
        try:
            listed = await list_tools(host, timeout_s=first_wait_s, wait_for_ready=False)
        except grpc.aio.AioRpcError as exc:
            self.routes.failed(host.name)
            error = rpc_error_text(exc)
            _log.warning(
                "tool host %r at %s does not answer ListTools %syet (%s): the runtime serves without it, "
                "and learns its tools when it does",
                host.name,
                host.address,
                "over mTLS " if host.secured else "",
                error,
            )
        if listed is not None:
            self.routes.learn(host.name, listed, "first")
        self.routes.watch(
            host,
            policy=policy or tool_hosts.RelistPolicy(),
            list_timeout_s=first_wait_s,
            listed=listed is not None,
            first_error=error,
        )
        return [spec.name for spec in listed or ()]

    async def remove_host(self, name: str) -> None:
        """Stop routing to a host and close its channel; its tools are routed no more."""
        self._host_signers.pop(name, None)
        await self.routes.remove(name)

    def _register(self, host: HostChannel, signer: GrantSigner | None) -> None:
        self.routes.add(host)
        if signer is not None:
            self._host_signers[host.name] = signer

    # The host table, as the server reads it.

    @property
    def counters(self) -> Counters:
        return self.routes.counters

    @counters.setter
    def counters(self, counters: Counters) -> None:
        self.routes.counters = counters

    @property
    def expected(self) -> frozenset[str]:
        """Tools the configuration names: pending, not unknown, while a host has never answered."""
        return self.routes.expected

    @expected.setter
    def expected(self, names: frozenset[str]) -> None:
        self.routes.expected = names

    @property
    def conflicts(self) -> tuple[tool_hosts.Conflict, ...]:
        return self.routes.conflicts

    def host_names(self) -> list[str]:
        return self.routes.host_names()

    def unlisted_hosts(self) -> list[str]:
        return self.routes.unlisted_hosts()

    def pending_tools(self) -> frozenset[str]:
        return self.routes.pending_tools()

    async def _route(self, tool: str, timeout_s: float) -> tuple[tool_pb2.ToolSpec, HostChannel] | None:
        """The spec and host of ``tool``; a pending tool is waited for within the connect layer's time."""
        wait_s = connect_timeout_s(connect_s=self.connect_s, call_timeout_s=timeout_s)
        return await self.routes.wait_for(tool, wait_s)

    def spec(self, tool: str) -> tool_pb2.ToolSpec | None:
        found = self.routes.find(tool)
        return found[0] if found else None

    def host_of(self, tool: str) -> str:
        """The configured name of the tool host serving ``tool``; "" when none does."""
        found = self.routes.find(tool)
        return found[1].name if found is not None else ""

    def tool_names(self) -> list[str]:
        """The tools a run may name: those served, and the pending ones (see :meth:`pending_tools`)."""
        return self.routes.tool_names()

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

        Past the tool's concurrency limit, or its tenant's cap of the tool, the call first waits
        for a slot, within ``timeout_s``; with none free in time it fails TRANSIENT, never sent.
        """
        began = time.monotonic()
        found = await self._route(tool, timeout_s)
        if found is None:
            if tool in self.pending_tools():
                hosts = self.unlisted_hosts()
                return ToolOutcome.failure(
                    "TRANSIENT",
                    f"no tool host has listed {tool!r} yet (not answering: {hosts}); not sent",
                    connect_failed=True,
                )
            return ToolOutcome.failure("UNKNOWN_TOOL", f"no configured tool host serves {tool!r}")
        spec, host = found
        timeout_s = max(0.001, timeout_s - (time.monotonic() - began))
        limit = self.slots.limit(tool, spec)
        cap = self.slots.tenant_limit(tool)  # of one tenant's calls of the tool
        if not limit and not cap:
            return await self._invoke(host, tool, arguments_json, metadata=metadata, timeout_s=timeout_s)
        try:
            tenant = metadata.tenant_id
            async with self.slots.hold(tool, limit, timeout_s, tenant=tenant, tenant_limit=cap) as waited:
                left = timeout_s - waited
                return await self._invoke(host, tool, arguments_json, metadata=metadata, timeout_s=left)
        except SlotTimeout as exc:
            return ToolOutcome.failure("TRANSIENT", f"no free slot: {exc}", timed_out=True, never_sent=True)

    async def _invoke(
        self, host: HostChannel, tool: str, arguments_json: str, *, metadata: CallMetadata, timeout_s: float
    ) -> ToolOutcome:
        began = time.monotonic()
        try:
            stub = await self._ready_stub(host, timeout_s)
        except ToolHostUnreachable as exc:
            return ToolOutcome.failure(
                "TRANSIENT", f"tool host UNAVAILABLE: {exc}; not sent", connect_failed=True
            )
        request = svc.InvokeToolRequest(tool=tool, arguments_json=arguments_json)
        call_metadata = self._metadata(host, tool, arguments_json, metadata)
        resends = _DRAIN_RESENDS if host.pooled else 0
        while True:
            left = max(0.0, timeout_s - (time.monotonic() - began))
            try:
                reply = await stub.InvokeTool(request, timeout=left, metadata=call_metadata)
                break
            except grpc.aio.AioRpcError as exc:
                refusal = _drain_refusal(exc)
                if refusal is None:
                    return _transport_failure(exc)
                if resends and left > 0:
                    # A pool member that began draining after the channel picked it: it took
                    # nothing, and the channel now picks a member whose health says SERVING.
                    resends -= 1
                    self.counters.inc("tool_drain_resend_count", host=host.name)
                    continue
                return ToolOutcome.failure(
                    "TRANSIENT",
                    f"tool host {host.name!r} is draining; the call was not started",
                    never_sent=True,
                    retry_after_s=refusal,
                )
        if reply.WhichOneof("outcome") == "error":
            return host_failure(reply.error, replayed=reply.replayed)
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
            ToolHostUnreachable: no connection to the host within the connect layer's time.
            grpc.aio.AioRpcError: the host could not be asked (deadline, no such key, refused).
        """
        found = self.routes.find(tool)
        if found is None:
            return False
        host = found[1]
        stub = await self._ready_stub(host, timeout_s)
        reply = await stub.CancelOperation(
            svc.CancelOperationRequest(idempotency_key=metadata.idempotency_key, reason=reason[:1000]),
            timeout=timeout_s,
            metadata=self._metadata(host, tool, arguments_json, metadata),
        )
        return reply.signalled

    async def query(
        self, tool: str, arguments_json: str, *, metadata: CallMetadata, timeout_s: float
    ) -> LedgerWord:
        """The host ledger's word on the call's idempotency key (GetOperation), never an RPC error.

        A recorded outcome comes back ``replayed``; NOT_FOUND when the host has no entry; UNKNOWN when
        the call is still running there, or the host cannot be reached or refuses to answer.
        """
        found = self.routes.find(tool)
        if found is None:
            # A pending tool's host has not been reached: it cannot say whether the call ran.
            return LedgerSilence.UNKNOWN if tool in self.pending_tools() else LedgerSilence.NOT_FOUND
        host = found[1]
        try:
            stub = await self._ready_stub(host, timeout_s)
            reply = await stub.GetOperation(
                svc.GetOperationRequest(idempotency_key=metadata.idempotency_key),
                timeout=timeout_s,
                metadata=self._metadata(host, tool, arguments_json, metadata),
            )
        except ToolHostUnreachable:
            return LedgerSilence.UNKNOWN
        except grpc.aio.AioRpcError as exc:
            # Only the host's own NOT_FOUND means "no entry": a deadline or a refusal tells nothing.
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return LedgerSilence.NOT_FOUND
            return LedgerSilence.UNKNOWN
        operation = reply.operation
        if operation.status == tool_pb2.OPERATION_STATUS_SUCCEEDED:
            return ToolOutcome(operation.result_json, None, True, host=host.name)
        if operation.status == tool_pb2.OPERATION_STATUS_FAILED:
            # "Stopped where it stood" is recorded, but says nothing about the effect.
            return host_failure(operation.error, replayed=True, host=host.name)
        return LedgerSilence.UNKNOWN

    async def preview(
        self, tool: str, arguments_json: str, *, metadata: CallMetadata, timeout_s: float
    ) -> str:
        """The tool host's impact summary for approvers; a plain fallback when it cannot give one."""
        found = self.routes.find(tool)
        if found is None and tool in self.pending_tools():
            return f"Would call {tool} with {arguments_json} (no preview: its tool host is not reachable yet)"
        if found is None:
            return f"{tool} is not served by any tool host"
        host = found[1]
        try:
            stub = await self._ready_stub(host, timeout_s)
            reply = await stub.PreviewTool(
                svc.PreviewToolRequest(tool=tool, arguments_json=arguments_json),
                timeout=timeout_s,
                metadata=self._metadata(host, tool, arguments_json, metadata),
            )
        except ToolHostUnreachable:
            return f"Would call {tool} with {arguments_json} (no preview: its tool host is unreachable)"
        except grpc.aio.AioRpcError as exc:
            return f"Would call {tool} with {arguments_json} (no preview: {exc.code().name})"
        return str(reply.impact_summary)

    async def _ready_stub(self, host: HostChannel, timeout_s: float) -> ToolHostServiceAsyncStub:
        """The host's stub once its channel is connected, within the connect layer's time.

        Raises:
            ToolHostUnreachable: no connection within ``min(connect_s, timeout_s)``.
        """
        stub = host.stub()  # first: it may move the host to a new channel (rotated TLS files)
        connect_s = connect_timeout_s(connect_s=self.connect_s, call_timeout_s=timeout_s)
        if not await host.connected(connect_s):
            raise ToolHostUnreachable(f"no connection to tool host {host.name!r} within {connect_s:g}s")
        return stub

    async def close(self) -> None:
        await self.routes.close()


async def _last_connect_error(host: HostChannel) -> str:
    """Why the channel cannot connect (a refused port, a failed TLS handshake), asked without waiting."""
    try:
        await host.stub().ListTools(svc.ListToolsRequest(), timeout=2.0)
    except grpc.aio.AioRpcError as exc:
        return f" ({exc.details()})"
    return ""


def host_failure(error: tool_pb2.ToolError, *, replayed: bool = False, host: str = "") -> ToolOutcome:
    """A tool host's typed error as an outcome, with the host's own word on whether it can tell
    what the tool did (``ToolError.details_json``: ``still_running``, or ``"effect": "unknown"``)."""
    still_running = host_unsure = deadline_exceeded = False
    if error.details_json and error.code in _MAY_BE_UNSURE:
        try:
            details = json.loads(error.details_json)
        except ValueError:
            details = None
        if isinstance(details, dict):
            still_running = details.get("still_running") is True
            host_unsure = details.get("effect") == "unknown"
            deadline_exceeded = details.get("deadline_exceeded") is True
    return ToolOutcome(
        None,
        ToolError(_core_code(error.code), error.message, error.details_json),
        replayed,
        host_unsure=host_unsure,
        still_running=still_running,
        host_timed_out=deadline_exceeded,
        host=host,
    )


def _core_code(code: int) -> ToolErrorCode:
    """The host's code in the core's words; a code newer than this runtime reads as UNSPECIFIED."""
    name = tool_pb2.ToolErrorCode.Name(code) if code in tool_pb2.ToolErrorCode.values() else ""
    try:
        return ToolErrorCode(name.removeprefix("TOOL_ERROR_CODE_"))
    except ValueError:
        return ToolErrorCode.UNSPECIFIED


_MAY_BE_UNSURE = (tool_pb2.TOOL_ERROR_CODE_TRANSIENT, tool_pb2.TOOL_ERROR_CODE_CANCELLED)
# Re-sends, within one attempt, of a call a pooled host refused as draining (each to a member the
# channel picks again); past them the refusal is the attempt's outcome.
_DRAIN_RESENDS = 2
# A RetryInfo delay past this is read as this: a hostile or broken host cannot park a call for long.
_MAX_RETRY_AFTER_S = 60.0
TOOLHOST_DOMAIN = "toolhost.agentrt"  # the ErrorInfo domain of the tool host's own statuses


def _transport_failure(exc: grpc.aio.AioRpcError) -> ToolOutcome:
    """An InvokeTool that ended without the host's answer, by its status code and nothing else.

    It was sent on a ready channel (see :meth:`HostChannel.connected`), so a broken transport may
    follow the request: such an outcome is in doubt, and a write is looked up before anything else.
    """
    code = exc.code()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return ToolOutcome.failure(
            "TRANSIENT", "the call's deadline passed before the tool answered", timed_out=True
        )
    if code == grpc.StatusCode.UNAVAILABLE:
        return ToolOutcome.failure(
            "TRANSIENT", f"tool host UNAVAILABLE: {exc.details()}", transport_lost=True
        )
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and not _from_host(exc):
        # The channel's own receive limit (the host sent a result past it instead of refusing it
        # itself): sending again would bring the same result back.
        return ToolOutcome.failure("RESULT_TOO_LARGE", "the tool's result is larger than the maximum")
    if code in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ABORTED):
        return ToolOutcome.failure("TRANSIENT", f"tool host {code.name}: {exc.details()}")
    if code == grpc.StatusCode.CANCELLED:
        return ToolOutcome.failure("CANCELLED", "call cancelled", transport_lost=True)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return ToolOutcome.failure("INVALID_INPUT", exc.details() or "invalid call")
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        # The host does not trust this runtime's grants: a configuration error, never the model's.
        _log.error("a tool host refused the runtime's call grant: %s %s", code.name, exc.details())
    return ToolOutcome.failure("PERMANENT", f"tool host {code.name}: {exc.details()}")


def _drain_refusal(exc: grpc.aio.AioRpcError) -> float | None:
    """The host's RetryInfo delay when it refused the call as draining (UNAVAILABLE with
    ``ErrorInfo{reason: DRAINING, domain: toolhost.agentrt}``: nothing recorded, nothing run);
    None for any other status. Read from the typed details, never from the message."""
    if exc.code() != grpc.StatusCode.UNAVAILABLE:
        return None
    status = _host_status(exc)
    if status is None:
        return None
    draining, delay_s = False, 0.0
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            draining = info.reason == "DRAINING" and info.domain == TOOLHOST_DOMAIN
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            delay_s = max(0.0, min(retry.retry_delay.ToNanoseconds() / 1e9, _MAX_RETRY_AFTER_S))
    return delay_s if draining else None


def _host_status(exc: grpc.aio.AioRpcError) -> Any:
    """The ``google.rpc.Status`` a tool host attached to its status, or None (none, or not parsable)."""
    trailers: Sequence[tuple[str, object]] = cast(Any, exc.trailing_metadata()) or ()
    for key, value in trailers:
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            status = status_pb2.Status()
            try:
                status.ParseFromString(value)
            except DecodeError:
                return None
            return status
    return None


def _from_host(exc: grpc.aio.AioRpcError) -> bool:
    """A status the host sent: tool hosts attach a google.rpc.Status; the local channel never does."""
    trailers: Sequence[tuple[str, object]] = cast(Any, exc.trailing_metadata()) or ()
    return any(key == "grpc-status-details-bin" for key, _ in trailers)
