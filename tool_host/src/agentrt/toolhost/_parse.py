"""Requests parsed by the handler's wrapper, so undecodable bytes are INVALID_ARGUMENT.

gRPC parses a request before any handler runs and answers INTERNAL when the bytes are not the
method's message. This interceptor takes the bytes instead and parses them itself. The tool
host authenticates at the transport (mTLS) and by call grants inside the handlers, which
cannot run without a message; saying "malformed" tells a caller nothing about either.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from agentrt.toolhost._status import InvalidRequest, abort_with

__all__ = ["ParseInHandler"]

if TYPE_CHECKING:
    _Interceptor = grpc.aio.ServerInterceptor[Any, Any]
else:  # generic only in the stubs
    _Interceptor = grpc.aio.ServerInterceptor


class ParseInHandler(_Interceptor):
    """Unary-request methods of ``prefix`` get raw bytes; a wrapper parses them or refuses."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(details)
        if handler is None or not details.method.startswith(self._prefix):
            return handler
        parse = handler.request_deserializer
        if handler.unary_unary is None or parse is None:
            return handler
        behavior: Callable[..., Any] = handler.unary_unary

        async def wrapped(data: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            if isinstance(data, bytes):
                try:
                    data = parse(data)
                except Exception:
                    await abort_with(
                        context,
                        InvalidRequest(
                            "the request is not a valid protobuf message of this method",
                            reason="MALFORMED_REQUEST",
                            violations=[("request", "not a valid protobuf message")],
                        ),
                    )
            return await behavior(data, context)

        return grpc.unary_unary_rpc_method_handler(
            wrapped, request_deserializer=None, response_serializer=handler.response_serializer
        )
