"""Requests parsed by the handler's wrapper, so undecodable bytes are INVALID_ARGUMENT.

gRPC parses a request before any handler runs and answers INTERNAL when the bytes are not the
method's message. The service's unary-request handlers are registered taking the bytes instead,
and a wrapper parses them itself. The tool host authenticates at the transport (mTLS) and by
call grants inside the handlers, which cannot run without a message; saying "malformed" tells a
caller nothing about either.

The handlers are wrapped once, at registration: a server interceptor doing the same ran (and
built a new handler) on every call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grpc
import grpc.aio

from agentrt.toolhost._status import InvalidRequest, abort_with

__all__ = ["add_parsing_in_handler"]


def add_parsing_in_handler(
    add_to_server: Callable[[Any, Any], None], servicer: Any, server: grpc.aio.Server
) -> None:
    """Register ``servicer`` as ``add_to_server`` (generated ``add_*Servicer_to_server``) would,
    with its unary-request methods parsing their own requests.

    Raises:
        RuntimeError: ``add_to_server`` registered no method handlers (generated code too old).
    """
    registrations = _Registrations()
    add_to_server(servicer, registrations)
    if not registrations.services:
        raise RuntimeError("the generated code registered no method handlers")
    for service, handlers in registrations.services:
        parsing = {method: _parsing(handler) for method, handler in handlers.items()}
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, parsing),))
        server.add_registered_method_handlers(service, parsing)  # type: ignore[attr-defined]  # stubs lag


class _Registrations:
    """Stands in for the server while generated code registers a service: keeps its handlers."""

    def __init__(self) -> None:
        self.services: list[tuple[str, dict[str, grpc.RpcMethodHandler[Any, Any]]]] = []

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler[Any, Any]]) -> None:
        """Ignored: the same handlers come to ``add_registered_method_handlers``, and are re-added."""

    def add_registered_method_handlers(
        self, service: str, handlers: Mapping[str, grpc.RpcMethodHandler[Any, Any]]
    ) -> None:
        self.services.append((service, dict(handlers)))


def _parsing(handler: grpc.RpcMethodHandler[Any, Any]) -> grpc.RpcMethodHandler[Any, Any]:
    """``handler`` taking raw bytes and parsing them, or refusing them; others as they are."""
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
