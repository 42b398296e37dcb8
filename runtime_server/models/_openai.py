"""The ``openai`` provider: the OpenAI Chat Completions API (or a compatible endpoint) over httpx.

Options (validated once, when the provider is created; never secrets)::

    {"base_url": "https://api.openai.com/v1",   # any OpenAI-compatible endpoint
     "api_key_env": "OPENAI_API_KEY",           # env var holding the key, read at creation
     "organization": null, "headers": {},       # extra non-secret headers
     "timeout_s": 60.0,                         # used when a request has no timeout_s
     "temperature": null, "max_tokens": null}

Calls are non-streaming: ``on_text_delta`` receives the whole text once. Streaming will send
``"stream": true`` from :meth:`OpenAIProvider._send` and feed deltas while reading the events;
the request building, parsing and error mapping in ``_openai_wire`` stay as they are.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import httpx
import pydantic
from pydantic import BaseModel, ConfigDict, Field

from ._errors import ModelConfigError, ModelError, ModelPermanentError, ModelTransientError
from ._openai_wire import build_chat_request, error_from_response, parse_chat_response, redact
from ._types import ModelProvider, ModelRequest, ModelResponse
from .hookspecs import hookimpl

__all__ = ["DEFAULT_BASE_URL", "PROVIDER_NAME", "OpenAIProvider"]

logger = logging.getLogger(__name__)

PROVIDER_NAME = "openai"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Option names that suggest someone is putting a secret into the (persisted) options.
_SECRET_OPTIONS = frozenset({"api_key", "apikey", "key", "secret", "token", "password", "authorization"})
_SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "api-key", "x-api-key"})


class _OpenAIOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = DEFAULT_BASE_URL
    api_key_env: str = Field(default="OPENAI_API_KEY", min_length=1)
    organization: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1)

    @pydantic.field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @pydantic.field_validator("headers")
    @classmethod
    def _no_secret_headers(cls, value: dict[str, str]) -> dict[str, str]:
        secret = sorted(name for name in value if name.lower() in _SECRET_HEADERS)
        if secret:
            raise ValueError(f"{', '.join(secret)} would carry a secret; the key comes from api_key_env")
        return value


def _describe(exc: pydantic.ValidationError) -> str:
    # Only locations and messages: input values could be secrets put in the wrong place.
    return "; ".join(f"{'.'.join(str(part) for part in err['loc'])}: {err['msg']}" for err in exc.errors())


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
        secret_options = sorted(name for name in options if name.lower() in _SECRET_OPTIONS)
        if secret_options:
            raise ModelConfigError(
                f"openai options must not carry secrets ({', '.join(secret_options)}); put the key in "
                'an environment variable and name it with "api_key_env"',
                reason="bad_options",
            )
        try:
            self._options = _OpenAIOptions.model_validate(dict(options))
        except pydantic.ValidationError as exc:
            raise ModelConfigError(
                f"invalid options for the openai model provider: {_describe(exc)}", reason="bad_options"
            ) from None
        env = os.environ if environ is None else environ
        api_key = env.get(self._options.api_key_env, "")
        if not api_key:
            raise ModelConfigError(
                f"the API key environment variable {self._options.api_key_env} is not set",
                reason="missing_api_key",
            )
        self._api_key = api_key
        headers = {**self._options.headers, "Authorization": f"Bearer {api_key}"}
        if self._options.organization:
            headers["OpenAI-Organization"] = self._options.organization
        self._client = httpx.AsyncClient(
            base_url=self._options.base_url + "/",
            headers=headers,
            timeout=self._options.timeout_s,
            transport=transport,
            follow_redirects=False,
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
                whole call (the ``timeout_s`` option when ``None``).
            on_text_delta: Receives the whole text once, when there is any (non-streaming).

        Returns:
            The decision, with the token counts the endpoint reported.

        Raises:
            ModelTransientError: 408/409/429/5xx, connection errors, timeouts.
            ModelPermanentError: Other 4xx (``reason`` ``context_length_exceeded`` among them), or an
                answer that is not a Chat Completions response.
            ModelAuthError: 401/403.
            ModelConfigError: The base URL cannot be used.
        """
        body, tool_names = build_chat_request(
            request, temperature=self._options.temperature, max_tokens=self._options.max_tokens
        )
        answer = await self._send(body, request)
        response = parse_chat_response(answer, request=request, tool_names=tool_names)
        if on_text_delta is not None and response.text:
            on_text_delta(response.text)
        return response

    async def _send(self, body: dict[str, Any], request: ModelRequest) -> Any:
        timeout_s = self._options.timeout_s if request.timeout_s is None else request.timeout_s
        if timeout_s <= 0:
            raise ModelTransientError("no time left for the model call", reason="timeout")
        logger.debug(
            "chat completion run_id=%s step=%d model=%s messages=%d tools=%d",
            request.run_id,
            request.step,
            request.spec.name,
            len(body["messages"]),
            len(body.get("tools", ())),
        )
        try:
            # httpx's timeout bounds each phase (connect, each read); asyncio's bounds the whole call.
            async with asyncio.timeout(timeout_s):
                response = await self._client.post(
                    "chat/completions", json=body, timeout=httpx.Timeout(timeout_s)
                )
        except (TimeoutError, httpx.TimeoutException):
            raise ModelTransientError(
                f"model call timed out after {timeout_s:g}s", reason="timeout"
            ) from None
        except httpx.UnsupportedProtocol as exc:
            raise ModelConfigError(self._transport_message(exc), reason="bad_options") from None
        except httpx.DecodingError as exc:
            raise ModelPermanentError(self._transport_message(exc), reason="bad_response") from None
        except httpx.RequestError as exc:
            raise ModelTransientError(self._transport_message(exc), reason="connection") from None
        if not response.is_success:
            error: ModelError = error_from_response(
                response.status_code, response.headers, response.content, secret=self._api_key
            )
            raise error
        try:
            return json.loads(response.content)
        except ValueError:
            raise ModelPermanentError(
                f"model endpoint returned HTTP {response.status_code} with a body that is not JSON",
                reason="bad_response",
                status_code=response.status_code,
            ) from None

    def _transport_message(self, exc: httpx.RequestError) -> str:
        detail = str(exc)
        text = f"cannot reach the model endpoint {self._options.base_url}: {type(exc).__name__}"
        return redact(text + (f": {detail}" if detail else ""), self._api_key)

    async def aclose(self) -> None:
        """Close the HTTP connections; idempotent."""
        await self._client.aclose()


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
