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
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import grpc
import grpc.aio

from runtime_server.api._errors import abort_with
from runtime_server.auth import (
    HEALTH_PREFIX,
    Authentication,
    AuthRequest,
    Principal,
    allowed,
    permission_for,
    principal_var,
)
from runtime_server.core import AgentRtError, PermissionDenied, Unauthenticated
from tool_host.security import peer_certificate

__all__ = ["AuthInterceptor"]

log = logging.getLogger("agentrt.auth")
Context = grpc.aio.ServicerContext[Any, Any]
_MAX_METADATA_VALUE = 8192  # a credential longer than this is refused before any parsing


def _request(method: str, context: Context) -> AuthRequest:
    metadata: dict[str, str] = {}
    for key, value in context.invocation_metadata() or ():
        if isinstance(value, str) and not key.endswith("-bin"):
            if len(value) > _MAX_METADATA_VALUE:
                raise Unauthenticated(f"metadata {key[:40]!r} is too long", reason="UNAUTHENTICATED")
            metadata[key.lower()] = value
    auth_context = cast(Mapping[str, Sequence[bytes]], context.auth_context() or {})
    return AuthRequest(method=method, metadata=metadata, peer=peer_certificate(auth_context))


if TYPE_CHECKING:
    _Interceptor = grpc.aio.ServerInterceptor[Any, Any]
else:  # generic only in the stubs
    _Interceptor = grpc.aio.ServerInterceptor


class AuthInterceptor(_Interceptor):
    """Authenticates and authorises every call but health checks."""

    def __init__(self, authentication: Authentication) -> None:
        self.authentication = authentication

    async def _principal(self, method: str, context: Context) -> Principal:
        try:
            principal = self.authentication.authenticate(_request(method, context))
            permission = permission_for(method)
            if permission is None:
                raise PermissionDenied(f"{method} is not open to callers", reason="METHOD_NOT_ALLOWED")
            if not allowed(principal.roles, permission):
                raise PermissionDenied(
                    f"{principal.subject} lacks a role that may {permission.value.replace('_', ' ')}",
                    reason="MISSING_ROLE",
                    metadata={"permission": permission.value, "subject": principal.subject},
                )
        except AgentRtError as exc:
            if isinstance(exc, Unauthenticated):
                log.info("refused %s: %s", method, exc.message)
            await abort_with(context, exc)
        except Exception:
            # An authenticator or plugin failed: refuse the call rather than guess.
            log.exception("authenticating %s failed", method)
            await abort_with(
                context, Unauthenticated("the credential could not be checked", reason="AUTH_FAILED")
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
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary, method), **serializers
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._streaming(handler.unary_stream, method), **serializers
            )
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._unary(handler.stream_unary, method), **serializers
            )
        assert handler.stream_stream is not None
        return grpc.stream_stream_rpc_method_handler(
            self._streaming(handler.stream_stream, method), **serializers
        )

    def _unary(self, behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
        async def wrapped(request: Any, context: Context) -> Any:
            principal = await self._principal(method, context)
            token = principal_var.set(principal)
            try:
                return await behavior(request, context)
            finally:
                principal_var.reset(token)

        return wrapped

    def _streaming(self, behavior: Callable[..., Any], method: str) -> Callable[..., Any]:
        if not inspect.isasyncgenfunction(behavior):
            # A handler that writes with context.write() and returns: await it like a unary one.
            return self._unary(behavior, method)

        async def wrapped(request: Any, context: Context) -> AsyncIterator[Any]:
            principal = await self._principal(method, context)
            # Each RPC runs in its own task, so the value cannot leak to another call.
            principal_var.set(principal)
            async for response in behavior(request, context):
                yield response

        return wrapped
