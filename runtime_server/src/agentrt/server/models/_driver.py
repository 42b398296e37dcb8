"""One ``complete()`` for every HTTP model API, driven by a per-provider :class:`Dialect`.

The driver owns what every HTTP provider does the same way: the API key, the endpoint and its
connect layer, whether a call streams, the call's timeout, the request id, and handing text to
``on_text_delta``. A dialect owns what differs between APIs, all of it pure::

    class Dialect(Protocol):
        call_name, path               what a call is called in logs, where it goes
        request_id_header             which header of the answer names the request
        headers(api_key)              credentials and fixed headers of every request
        build(request, stream=...)    the JSON body, and wire tool name -> tool name
        parse(body, ...)              a 2xx JSON answer -> ModelResponse
        stream(...)                   a StreamAssembly fed the events of a streamed answer
        error_from_response(...)      a non-2xx answer -> ModelError, by status and typed fields

A provider is :class:`HTTPProvider` with its options model and dialect (``_openai``,
``_anthropic``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import httpx

from ._errors import ModelError
from ._http import DEFAULT_CONNECT_S, STREAMED, Endpoint, HTTPOptions, RequestId, read_api_key
from ._sse import ServerSentEvent
from ._types import ModelRequest, ModelResponse

__all__ = ["Dialect", "HTTPProvider", "StreamAssembly"]

logger = logging.getLogger(__name__)


class StreamAssembly(Protocol):
    """Collects the events of one streamed answer (``ChatStream``, ``MessagesStream``)."""

    def feed(self, event: ServerSentEvent) -> bool:
        """Take the next event; return True at the final one.

        Raises:
            ModelError: An error event, or an event of the wrong shape.
        """
        ...

    def response(self) -> ModelResponse:
        """The assembled answer, once the final event was fed."""
        ...


class Dialect(Protocol):
    """What one model API says differently; pure, no I/O."""

    #: What a call is called in debug logs ("chat completion", "messages call").
    call_name: str
    #: Path of the call under the base URL.
    path: str
    #: Header of the answer that carries the provider's request id.
    request_id_header: str

    def headers(self, api_key: str) -> httpx.Headers:
        """Headers of every request, credentials included."""
        ...

    def build(self, request: ModelRequest, *, stream: bool) -> tuple[dict[str, Any], Mapping[str, str]]:
        """The JSON body of ``request``, and the map from wire tool names back to tool names.

        Raises:
            ModelPermanentError: The request cannot be expressed in this API (a tool name, a role).
        """
        ...

    def parse(self, body: Any, *, request: ModelRequest, tool_names: Mapping[str, str]) -> ModelResponse:
        """A 2xx JSON answer as a response.

        Raises:
            ModelPermanentError: ``bad_response``: the answer does not have the API's shape.
        """
        ...

    def stream(
        self,
        *,
        request: ModelRequest,
        tool_names: Mapping[str, str],
        on_text_delta: Callable[[str], None] | None,
        secret: str,
    ) -> StreamAssembly:
        """A fresh assembly for the events of one streamed answer."""
        ...

    def error_from_response(
        self, status_code: int, headers: Mapping[str, str], body: bytes, *, secret: str = ""
    ) -> ModelError:
        """A non-2xx answer as an error, by its status and typed fields (never its message)."""
        ...


class HTTPProvider:
    """A model provider over HTTP: one (model API, options); safe for concurrent calls.

    Args:
        options: The validated provider options.
        dialect: The model API's dialect.
        environ: Where to read the API key variable; defaults to ``os.environ``.
        transport: httpx transport to use instead of the network one (tests, proxies).
        connect_s: How long a call waits for a connection (``[timeouts] connect_s``).

    Raises:
        ModelConfigError: The API key variable is unset or empty, or its file unusable.
    """

    def __init__(
        self,
        *,
        options: HTTPOptions,
        dialect: Dialect,
        environ: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        connect_s: float = DEFAULT_CONNECT_S,
    ) -> None:
        self._options = options
        self._dialect = dialect
        self._api_key = read_api_key(environ, options.api_key_env, options.api_key_file)
        self._endpoint = Endpoint(
            base_url=options.base_url,
            headers=dialect.headers(self._api_key),
            timeout_s=options.timeout_s,
            transport=transport,
            secret=self._api_key,
            error_from_response=dialect.error_from_response,
            connect_s=connect_s,
        )

    def __repr__(self) -> str:
        options = self._options
        return f"{type(self).__name__}(base_url={options.base_url!r}, api_key_env={options.api_key_env!r})"

    async def complete(
        self, request: ModelRequest, *, on_text_delta: Callable[[str], None] | None = None
    ) -> ModelResponse:
        """Ask the endpoint for the next decision.

        Args:
            request: The call; ``request.spec.name`` is the model, ``request.timeout_s`` bounds the
                whole call, reading the stream included (the ``timeout_s`` option when ``None``).
            on_text_delta: Receives text fragments as they arrive (streaming, unless the
                ``stream`` option is false), or the whole text once when the call does not stream.

        Returns:
            The decision, with the token counts the endpoint reported (estimates when it did not).

        Raises:
            ModelTransientError: 408/409/429/5xx (529 ``overloaded``), an error event in the stream
                that says so, connection errors and timeouts (with ``connect_failed`` and
                ``timed_out``), and ``stream_interrupted`` when a stream breaks off (after some
                fragments, maybe).
            ModelPermanentError: Other 4xx (``context_length_exceeded`` when the API's typed fields
                say so), or an answer that does not have the API's shape.
            ModelAuthError: 401/403.
            ModelConfigError: The base URL cannot be used.
        """
        options, dialect = self._options, self._dialect
        stream = on_text_delta is not None and options.stream
        body, tool_names = dialect.build(request, stream=stream)
        timeout_s = options.timeout_s if request.timeout_s is None else request.timeout_s
        logger.debug(
            "%s run_id=%s step=%d model=%s messages=%d tools=%d stream=%s",
            dialect.call_name,
            request.run_id,
            request.step,
            request.spec.name,
            len(body["messages"]),
            len(body.get("tools", ())),
            stream,
        )
        assembly = (
            dialect.stream(
                request=request, tool_names=tool_names, on_text_delta=on_text_delta, secret=self._api_key
            )
            if stream
            else None
        )
        ids = RequestId(dialect.request_id_header)
        answer = await self._endpoint.post(
            dialect.path,
            body,
            timeout_s=timeout_s,
            on_event=assembly.feed if assembly is not None else None,
            on_headers=ids.take,
        )
        if answer is STREAMED and assembly is not None:
            return ids.stamp(assembly.response())
        response = dialect.parse(answer, request=request, tool_names=tool_names)
        if on_text_delta is not None and response.text:
            on_text_delta(response.text)
        return ids.stamp(response)

    async def aclose(self) -> None:
        """Close the HTTP connections; idempotent."""
        await self._endpoint.aclose()
