"""The server interceptor that gives every RPC a principal and checks its role (DESIGN R10.2).

It wraps each method's behaviour rather than answering at interceptor level, because only the
handler's context knows the peer's verified certificate and can abort with rich details. The
principal is set in a context variable for the handler (:func:`current_principal`). Health
checks pass through; every other method must be in the permission table, or it is refused
(fail closed, so a new RPC cannot ship unprotected).
"""

from __future__ import annotations

import inspect
import logging
import traceback
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import grpc
import grpc.aio

from agentrt.server.api._errors import abort_internal, abort_with
from agentrt.server.auth import (
    HEALTH_PREFIX,
    MAX_AUTHORIZATION_BYTES,
    Authentication,
    AuthRequest,
    Principal,
    allowed,
    permission_for,
    principal_var,
)
from agentrt.server.core import AgentRtError, InvalidRequest, NotAuthenticated, NotPermitted
from agentrt.toolhost.security import PeerCertificate, peer_certificate

__all__ = ["AuthInterceptor"]

log = logging.getLogger("agentrt.auth")
Context = grpc.aio.ServicerContext[Any, Any]
_MAX_METADATA_VALUE = 8192  # a credential longer than this is refused before any parsing


class _PeerNames:
    """Names of client certificates by their PEM, so a connection's calls parse it once.

    Parsing a certificate costs about 25 us; a client makes many calls with one. Bounded: past
    ``size`` entries the least recently used goes.
    """

    def __init__(self, *, size: int = 1024) -> None:
        self._size = size
        self._cache: OrderedDict[bytes, PeerCertificate | None] = OrderedDict()

    def get(self, auth_context: Mapping[str, Sequence[bytes]]) -> PeerCertificate | None:
        pem = auth_context.get("x509_pem_cert")
        if not pem:
            return None
        key = pem[0]
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        found = peer_certificate(auth_context)
        self._cache[key] = found
        if len(self._cache) > self._size:
            self._cache.popitem(last=False)
        return found


def _request(method: str, context: Context, peers: _PeerNames) -> AuthRequest:
    metadata: dict[str, str] = {}
    for key, value in context.invocation_metadata() or ():
        if isinstance(value, str) and not key.endswith("-bin"):
            key = key.lower()
            if key == "authorization":
                if key in metadata:
                    raise NotAuthenticated(
                        "send one authorization header, not several", reason="MALFORMED_AUTHORIZATION"
                    )
                if len(value) > MAX_AUTHORIZATION_BYTES:
                    raise NotAuthenticated(
                        f"the authorization header is longer than {MAX_AUTHORIZATION_BYTES} bytes",
                        reason="MALFORMED_AUTHORIZATION",
                    )
            elif len(value) > _MAX_METADATA_VALUE:
                raise NotAuthenticated(f"metadata {key[:40]!r} is too long", reason="UNAUTHENTICATED")
            metadata[key] = value
    auth_context = cast(Mapping[str, Sequence[bytes]], context.auth_context() or {})
    return AuthRequest(method=method, metadata=metadata, peer=peers.get(auth_context))


def _where(exc: BaseException) -> str:
    # The innermost frame of the failure, without the exception's message (it may quote a credential).
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    last = frames[-1]
    return f"{last.filename}:{last.lineno} in {last.name}"


async def _parse(parse: Callable[[bytes], Any], data: Any, context: Context) -> Any:
    if not isinstance(data, bytes):  # an in-process call with a message already
        return data
    try:
        return parse(data)
    except Exception:
        await abort_with(
            context,
            InvalidRequest(
                "the request is not a valid protobuf message of this method",
                field="request",
                reason="MALFORMED_REQUEST",
            ),
        )


if TYPE_CHECKING:
    _Interceptor = grpc.aio.ServerInterceptor[Any, Any]
else:  # generic only in the stubs
    _Interceptor = grpc.aio.ServerInterceptor


class AuthInterceptor(_Interceptor):
    """Authenticates and authorises every call but health checks."""

    def __init__(self, authentication: Authentication) -> None:
        self.authentication = authentication
        self._peers = _PeerNames()

    async def _principal(self, method: str, context: Context) -> Principal:
        try:
            local = self.authentication.local
            # With no authentication configured nothing in the call is read (the local fast path).
            principal = (
                local
                if local is not None
                else self.authentication.authenticate(_request(method, context, self._peers))
            )
            permission = permission_for(method)
            if permission is None:
                raise NotPermitted(f"{method} is not open to callers", reason="METHOD_NOT_ALLOWED")
            if not allowed(principal.roles, permission):
                raise NotPermitted(
                    f"{principal.subject} lacks a role that may {permission.value.replace('_', ' ')}",
                    reason="MISSING_ROLE",
                    metadata={"permission": permission.value, "subject": principal.subject},
                )
        except AgentRtError as exc:
            if isinstance(exc, NotAuthenticated):
                log.info("refused %s: %s", method, exc.message)
            await abort_with(context, exc)
        except Exception as exc:
            # An authenticator or plugin failed: refuse the call rather than guess. Only the type
            # and place are logged: a plugin's message or traceback text may quote the credential.
            log.error("authenticating %s failed: %s at %s", method, type(exc).__name__, _where(exc))
            await abort_with(
                context, NotAuthenticated("the credential could not be checked", reason="AUTH_FAILED")
            )
        return principal

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(HEALTH_PREFIX):
            return handler
        return self._wrap(handler, method)

    def _wrap(self, handler: grpc.RpcMethodHandler[Any, Any], method: str) -> grpc.RpcMethodHandler[Any, Any]:
        serializers = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        # Unary requests arrive as bytes and are parsed after authentication: garbage from a
        # caller is INVALID_ARGUMENT (gRPC itself would answer INTERNAL), and only for a caller
        # who may make the call.
        parse = handler.request_deserializer
        raw = {"request_deserializer": None, "response_serializer": handler.response_serializer}
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(self._unary(handler.unary_unary, method, parse), **raw)
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._streaming(handler.unary_stream, method, parse), **raw
            )
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._unary(handler.stream_unary, method), **serializers
            )
        assert handler.stream_stream is not None
        return grpc.stream_stream_rpc_method_handler(
            self._streaming(handler.stream_stream, method), **serializers
        )

    def _unary(
        self, behavior: Callable[..., Any], method: str, parse: Callable[[bytes], Any] | None = None
    ) -> Callable[..., Any]:
        async def wrapped(request: Any, context: Context) -> Any:
            principal = await self._principal(method, context)
            if parse is not None:
                request = await _parse(parse, request, context)
            token = principal_var.set(principal)
            try:
                return await behavior(request, context)
            except Exception as exc:  # escaped the handler: never gRPC's UNKNOWN with its text
                await abort_internal(context, exc)
            finally:
                principal_var.reset(token)

        return wrapped

    def _streaming(
        self, behavior: Callable[..., Any], method: str, parse: Callable[[bytes], Any] | None = None
    ) -> Callable[..., Any]:
        if not inspect.isasyncgenfunction(behavior):
            # A handler that writes with context.write() and returns: await it like a unary one.
            return self._unary(behavior, method, parse)

        async def wrapped(request: Any, context: Context) -> AsyncIterator[Any]:
            principal = await self._principal(method, context)
            if parse is not None:
                request = await _parse(parse, request, context)
            # Each RPC runs in its own task, so the value cannot leak to another call.
            principal_var.set(principal)
            try:
                async for response in behavior(request, context):
                    yield response
            except Exception as exc:  # escaped the handler: never gRPC's UNKNOWN with its text
                await abort_internal(context, exc)

        return wrapped
