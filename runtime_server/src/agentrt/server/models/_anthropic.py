"""The ``anthropic`` provider: the Anthropic Messages API (``POST /v1/messages``) over httpx.

Options (validated once, when the provider is created; never secrets)::

    {"base_url": "https://api.anthropic.com",   # API root; requests go to {base_url}/v1/messages
     "api_key_env": "ANTHROPIC_API_KEY",        # env var holding the key, read at creation
     "headers": {},                             # extra non-secret headers, e.g. anthropic-beta
     "timeout_s": 60.0,                         # used when a request has no timeout_s
     "stream": true,                            # stream when the caller takes text deltas
     "temperature": null,                       # 0..1
     "max_tokens": 1024}                        # required by the API

Requests carry ``x-api-key`` and ``anthropic-version: 2023-06-01`` (a ``headers`` entry may pin
another version). A call streams when the caller passes ``on_text_delta`` and ``stream`` is not
false; fragments reach ``on_text_delta`` as the events arrive (``_anthropic_stream``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import httpx
from pydantic import Field

from ._anthropic_stream import MessagesStream
from ._anthropic_wire import build_messages_request, error_from_response, parse_messages_response
from ._http import STREAMED, Endpoint, HTTPOptions, RequestId, parse_options, read_api_key
from ._types import ModelProvider, ModelRequest, ModelResponse
from .hookspecs import hookimpl

__all__ = ["ANTHROPIC_VERSION", "DEFAULT_BASE_URL", "PROVIDER_NAME", "AnthropicProvider"]

logger = logging.getLogger(__name__)

PROVIDER_NAME = "anthropic"
DEFAULT_BASE_URL = "https://api.anthropic.com"
#: Value of the ``anthropic-version`` header: the API version whose shapes ``_anthropic_wire`` speaks.
ANTHROPIC_VERSION = "2023-06-01"


class _AnthropicOptions(HTTPOptions):
    base_url: str = DEFAULT_BASE_URL
    api_key_env: str = Field(default="ANTHROPIC_API_KEY", min_length=1)
    temperature: float | None = Field(default=None, ge=0, le=1)
    max_tokens: int = Field(default=1024, ge=1)


class AnthropicProvider:
    """Messages API client for one (model, options); safe for concurrent calls.

    Args:
        options: Provider options (see the module docstring).
        environ: Where to read the API key variable; defaults to ``os.environ``.
        transport: httpx transport to use instead of the network one (tests, proxies).

    Raises:
        ModelConfigError: Bad options, or the API key variable is unset or empty.
    """

    def __init__(
        self,
        *,
        options: Mapping[str, Any],
        environ: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._options = parse_options(_AnthropicOptions, options, provider=PROVIDER_NAME)
        api_key = read_api_key(environ, self._options.api_key_env, self._options.api_key_file)
        self._api_key = api_key
        headers = httpx.Headers({"anthropic-version": ANTHROPIC_VERSION})
        headers.update(self._options.headers)  # case-insensitive: may replace anthropic-version
        headers["x-api-key"] = api_key
        self._endpoint = Endpoint(
            base_url=self._options.base_url,
            headers=headers,
            timeout_s=self._options.timeout_s,
            transport=transport,
            secret=api_key,
            error_from_response=error_from_response,
        )

    def __repr__(self) -> str:
        options = self._options
        return f"AnthropicProvider(base_url={options.base_url!r}, api_key_env={options.api_key_env!r})"

    async def complete(
        self, request: ModelRequest, *, on_text_delta: Callable[[str], None] | None = None
    ) -> ModelResponse:
        """Ask the Messages API for the next decision.

        Args:
            request: The call; ``request.spec.name`` is the model, ``request.timeout_s`` bounds the
                whole call, reading the stream included (the ``timeout_s`` option when ``None``).
            on_text_delta: Receives text fragments as they arrive (streaming), or the whole text
                once when the call does not stream.

        Returns:
            The decision, with the token counts the API reported (estimates when it did not).

        Raises:
            ModelTransientError: 408/409/429/5xx/529 (``overloaded``), an ``error`` event in the
                stream, connection errors, timeouts, and ``stream_interrupted`` when a stream breaks
                off (after some fragments, maybe).
            ModelPermanentError: Other 4xx (``reason`` ``context_length_exceeded`` among them), or an
                answer that is not a Messages response.
            ModelAuthError: 401/403.
            ModelConfigError: The base URL cannot be used.
        """
        options = self._options
        stream = on_text_delta is not None and options.stream
        body, tool_names = build_messages_request(
            request, max_tokens=options.max_tokens, temperature=options.temperature, stream=stream
        )
        timeout_s = options.timeout_s if request.timeout_s is None else request.timeout_s
        logger.debug(
            "messages call run_id=%s step=%d model=%s messages=%d tools=%d stream=%s",
            request.run_id,
            request.step,
            request.spec.name,
            len(body["messages"]),
            len(body.get("tools", ())),
            stream,
        )
        messages = MessagesStream(
            request=request, tool_names=tool_names, on_text_delta=on_text_delta, secret=self._api_key
        )
        ids = RequestId("request-id")
        answer = await self._endpoint.post(
            "v1/messages",
            body,
            timeout_s=timeout_s,
            on_event=messages.feed if stream else None,
            on_headers=ids.take,
        )
        if answer is STREAMED:
            return ids.stamp(messages.response())
        response = parse_messages_response(answer, request=request, tool_names=tool_names)
        if on_text_delta is not None and response.text:
            on_text_delta(response.text)
        return ids.stamp(response)

    async def aclose(self) -> None:
        """Close the HTTP connections; idempotent."""
        await self._endpoint.aclose()


@hookimpl
def agentrt_model_provider(name: str, options: Mapping[str, Any]) -> ModelProvider | None:
    """Create the ``anthropic`` provider."""
    if name != PROVIDER_NAME:
        return None
    return AnthropicProvider(options=options)


@hookimpl
def agentrt_model_provider_names() -> list[str]:
    """Declare the ``anthropic`` provider."""
    return [PROVIDER_NAME]
