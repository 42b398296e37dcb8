"""The ``openai`` provider: the OpenAI Chat Completions API (or a compatible endpoint) over httpx.

Options (validated once, when the provider is created; never secrets)::

    {"base_url": "https://api.openai.com/v1",   # any OpenAI-compatible endpoint
     "api_key_env": "OPENAI_API_KEY",           # env var holding the key, read at creation
     "organization": null, "headers": {},       # extra non-secret headers
     "timeout_s": 60.0,                         # used when a request has no timeout_s
     "stream": true,                            # stream when the caller takes text deltas
     "temperature": null, "max_tokens": null}

A call streams (``"stream": true`` with ``stream_options.include_usage``) when the caller passes
``on_text_delta`` and ``stream`` is not false: fragments reach ``on_text_delta`` as the events
arrive (``_openai_stream``). Otherwise the call waits for the whole answer (``_openai_wire``) and
``on_text_delta`` receives the whole text once. A server that answers a streaming request with
plain JSON is handled like a non-streaming answer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import httpx
from pydantic import Field

from ._http import STREAMED, Endpoint, HTTPOptions, RequestId, parse_options, read_api_key
from ._openai_stream import ChatStream
from ._openai_wire import build_chat_request, error_from_response, parse_chat_response
from ._types import ModelProvider, ModelRequest, ModelResponse
from .hookspecs import hookimpl

__all__ = ["DEFAULT_BASE_URL", "PROVIDER_NAME", "OpenAIProvider"]

logger = logging.getLogger(__name__)

PROVIDER_NAME = "openai"
DEFAULT_BASE_URL = "https://api.openai.com/v1"


class _OpenAIOptions(HTTPOptions):
    base_url: str = DEFAULT_BASE_URL
    api_key_env: str = Field(default="OPENAI_API_KEY", min_length=1)
    organization: str | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1)


class OpenAIProvider:
    """Chat Completions client for one (model, options); safe for concurrent calls.

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
        self._options = parse_options(_OpenAIOptions, options, provider=PROVIDER_NAME)
        api_key = read_api_key(environ, self._options.api_key_env, self._options.api_key_file)
        self._api_key = api_key
        headers = {**self._options.headers, "Authorization": f"Bearer {api_key}"}
        if self._options.organization:
            headers["OpenAI-Organization"] = self._options.organization
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
        return f"OpenAIProvider(base_url={options.base_url!r}, api_key_env={options.api_key_env!r})"

    async def complete(
        self, request: ModelRequest, *, on_text_delta: Callable[[str], None] | None = None
    ) -> ModelResponse:
        """Ask the endpoint for the next decision.

        Args:
            request: The call; ``request.spec.name`` is the model, ``request.timeout_s`` bounds the
                whole call, reading the stream included (the ``timeout_s`` option when ``None``).
            on_text_delta: Receives text fragments as they arrive (streaming), or the whole text
                once when the call does not stream.

        Returns:
            The decision, with the token counts the endpoint reported (estimates when it did not).

        Raises:
            ModelTransientError: 408/409/429/5xx, connection errors, timeouts, and
                ``stream_interrupted`` when a stream breaks off (after some fragments, maybe).
            ModelPermanentError: Other 4xx (``reason`` ``context_length_exceeded`` among them), or an
                answer that is not a Chat Completions response.
            ModelAuthError: 401/403.
            ModelConfigError: The base URL cannot be used.
        """
        options = self._options
        body, tool_names = build_chat_request(
            request, temperature=options.temperature, max_tokens=options.max_tokens
        )
        stream = on_text_delta is not None and options.stream
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        timeout_s = options.timeout_s if request.timeout_s is None else request.timeout_s
        logger.debug(
            "chat completion run_id=%s step=%d model=%s messages=%d tools=%d stream=%s",
            request.run_id,
            request.step,
            request.spec.name,
            len(body["messages"]),
            len(body.get("tools", ())),
            stream,
        )
        chat = ChatStream(
            request=request, tool_names=tool_names, on_text_delta=on_text_delta, secret=self._api_key
        )
        ids = RequestId("x-request-id")
        answer = await self._endpoint.post(
            "chat/completions",
            body,
            timeout_s=timeout_s,
            on_event=chat.feed if stream else None,
            on_headers=ids.take,
        )
        if answer is STREAMED:
            return ids.stamp(chat.response())
        response = parse_chat_response(answer, request=request, tool_names=tool_names)
        if on_text_delta is not None and response.text:
            on_text_delta(response.text)
        return ids.stamp(response)

    async def aclose(self) -> None:
        """Close the HTTP connections; idempotent."""
        await self._endpoint.aclose()


@hookimpl
def agentrt_model_provider(name: str, options: Mapping[str, Any]) -> ModelProvider | None:
    """Create the ``openai`` provider."""
    if name != PROVIDER_NAME:
        return None
    return OpenAIProvider(options=options)


@hookimpl
def agentrt_model_provider_names() -> list[str]:
    """Declare the ``openai`` provider."""
    return [PROVIDER_NAME]
