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

from collections.abc import Callable, Mapping
from typing import Any

import httpx
from pydantic import Field

from ._anthropic_stream import MessagesStream
from ._anthropic_wire import build_messages_request, error_from_response, parse_messages_response
from ._driver import HTTPProvider, StreamAssembly
from ._errors import ModelError
from ._http import DEFAULT_CONNECT_S, HTTPOptions, parse_options
from ._types import ModelProvider, ModelRequest, ModelResponse
from .hookspecs import hookimpl

__all__ = ["ANTHROPIC_VERSION", "DEFAULT_BASE_URL", "PROVIDER_NAME", "AnthropicDialect", "AnthropicProvider"]

PROVIDER_NAME = "anthropic"
DEFAULT_BASE_URL = "https://api.anthropic.com"
#: Value of the ``anthropic-version`` header: the API version whose shapes ``_anthropic_wire`` speaks.
ANTHROPIC_VERSION = "2023-06-01"


class _AnthropicOptions(HTTPOptions):
    base_url: str = DEFAULT_BASE_URL
    api_key_env: str = Field(default="ANTHROPIC_API_KEY", min_length=1)
    temperature: float | None = Field(default=None, ge=0, le=1)
    max_tokens: int = Field(default=1024, ge=1)


class AnthropicDialect:
    """The Messages API, as :class:`~agentrt.server.models._driver.Dialect` asks."""

    call_name = "messages call"
    path = "v1/messages"
    request_id_header = "request-id"

    def __init__(self, options: _AnthropicOptions) -> None:
        self._options = options

    def headers(self, api_key: str) -> httpx.Headers:
        headers = httpx.Headers({"anthropic-version": ANTHROPIC_VERSION})
        headers.update(self._options.headers)  # case-insensitive: may replace anthropic-version
        headers["x-api-key"] = api_key
        return headers

    def build(self, request: ModelRequest, *, stream: bool) -> tuple[dict[str, Any], Mapping[str, str]]:
        options = self._options
        return build_messages_request(
            request, max_tokens=options.max_tokens, temperature=options.temperature, stream=stream
        )

    def parse(self, body: Any, *, request: ModelRequest, tool_names: Mapping[str, str]) -> ModelResponse:
        return parse_messages_response(body, request=request, tool_names=tool_names)

    def stream(
        self,
        *,
        request: ModelRequest,
        tool_names: Mapping[str, str],
        on_text_delta: Callable[[str], None] | None,
        secret: str,
    ) -> StreamAssembly:
        return MessagesStream(
            request=request, tool_names=tool_names, on_text_delta=on_text_delta, secret=secret
        )

    def error_from_response(
        self, status_code: int, headers: Mapping[str, str], body: bytes, *, secret: str = ""
    ) -> ModelError:
        return error_from_response(status_code, headers, body, secret=secret)


class AnthropicProvider(HTTPProvider):
    """Messages API client for one (model, options); safe for concurrent calls.

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
        parsed = parse_options(_AnthropicOptions, options, provider=PROVIDER_NAME)
        super().__init__(
            options=parsed,
            dialect=AnthropicDialect(parsed),
            environ=environ,
            transport=transport,
            connect_s=connect_s,
        )


@hookimpl
def agentrt_model_provider(name: str, options: Mapping[str, Any], connect_s: float) -> ModelProvider | None:
    """Create the ``anthropic`` provider."""
    if name != PROVIDER_NAME:
        return None
    return AnthropicProvider(options=options, connect_s=connect_s)


@hookimpl
def agentrt_model_provider_names() -> list[str]:
    """Declare the ``anthropic`` provider."""
    return [PROVIDER_NAME]
