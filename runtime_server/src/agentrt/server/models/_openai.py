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

from collections.abc import Callable, Mapping
from typing import Any

import httpx
from pydantic import Field

from ._driver import HTTPProvider, StreamAssembly
from ._errors import ModelError
from ._http import DEFAULT_CONNECT_S, HTTPOptions, parse_options
from ._openai_stream import ChatStream
from ._openai_wire import build_chat_request, error_from_response, parse_chat_response
from ._types import ModelProvider, ModelRequest, ModelResponse
from .hookspecs import hookimpl

__all__ = ["DEFAULT_BASE_URL", "PROVIDER_NAME", "OpenAIDialect", "OpenAIProvider"]

PROVIDER_NAME = "openai"
DEFAULT_BASE_URL = "https://api.openai.com/v1"


class _OpenAIOptions(HTTPOptions):
    base_url: str = DEFAULT_BASE_URL
    api_key_env: str = Field(default="OPENAI_API_KEY", min_length=1)
    organization: str | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1)


class OpenAIDialect:
    """Chat Completions, as :class:`~agentrt.server.models._driver.Dialect` asks."""

    call_name = "chat completion"
    path = "chat/completions"
    request_id_header = "x-request-id"

    def __init__(self, options: _OpenAIOptions) -> None:
        self._options = options

    def headers(self, api_key: str) -> httpx.Headers:
        headers = httpx.Headers(self._options.headers)
        headers["Authorization"] = f"Bearer {api_key}"
        if self._options.organization:
            headers["OpenAI-Organization"] = self._options.organization
        return headers

    def build(self, request: ModelRequest, *, stream: bool) -> tuple[dict[str, Any], Mapping[str, str]]:
        options = self._options
        body, tool_names = build_chat_request(
            request, temperature=options.temperature, max_tokens=options.max_tokens
        )
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body, tool_names

    def parse(self, body: Any, *, request: ModelRequest, tool_names: Mapping[str, str]) -> ModelResponse:
        return parse_chat_response(body, request=request, tool_names=tool_names)

    def stream(
        self,
        *,
        request: ModelRequest,
        tool_names: Mapping[str, str],
        on_text_delta: Callable[[str], None] | None,
        secret: str,
    ) -> StreamAssembly:
        return ChatStream(request=request, tool_names=tool_names, on_text_delta=on_text_delta, secret=secret)

    def error_from_response(
        self, status_code: int, headers: Mapping[str, str], body: bytes, *, secret: str = ""
    ) -> ModelError:
        return error_from_response(status_code, headers, body, secret=secret)


class OpenAIProvider(HTTPProvider):
    """Chat Completions client for one (model, options); safe for concurrent calls.

    Args:
        options: Provider options (see the module docstring).
        environ: Where to read the API key variable; defaults to ``os.environ``.
        transport: httpx transport to use instead of the network one (tests, proxies).
        connect_s: How long a call waits for a connection (``[timeouts] connect_s``).

    Raises:
        ModelConfigError: Bad options, or the API key variable is unset or empty.
    """

    def __init__(
        self,
        *,
        options: Mapping[str, Any],
        environ: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        connect_s: float = DEFAULT_CONNECT_S,
    ) -> None:
        parsed = parse_options(_OpenAIOptions, options, provider=PROVIDER_NAME)
        super().__init__(
            options=parsed,
            dialect=OpenAIDialect(parsed),
            environ=environ,
            transport=transport,
            connect_s=connect_s,
        )


@hookimpl
def agentrt_model_provider(name: str, options: Mapping[str, Any], connect_s: float) -> ModelProvider | None:
    """Create the ``openai`` provider."""
    if name != PROVIDER_NAME:
        return None
    return OpenAIProvider(options=options, connect_s=connect_s)


@hookimpl
def agentrt_model_provider_names() -> list[str]:
    """Declare the ``openai`` provider."""
    return [PROVIDER_NAME]
