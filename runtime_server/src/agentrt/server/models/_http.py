"""HTTP plumbing shared by the ``openai`` and ``anthropic`` providers.

Option checks, the API key, and :class:`Endpoint`, which posts one JSON body and turns every way
the exchange can fail into a :class:`~agentrt.server.models.ModelError`. Failures are told apart
by httpx's exception types and the answer's status, never by a message::

    when                                  what                        error (reason, facts)
    connecting (TCP, TLS)                 refused, unreachable        transient (connection,
                                          not within connect_s        connect_failed)
    before the answer's first byte        reset, bad TLS after it     transient (connection)
    while reading an event stream         reset, truncated body,      transient (stream_interrupted)
                                          no final event
    any time                              request.timeout_s elapsed   transient (timeout, timed_out)
    non-2xx answer                        status, error body          the dialect's error_from_response
    2xx answer                            not JSON / not a stream     permanent (bad_response)

The connect layer: a connection must be made within ``min(connect_s, the call's timeout)``
(``[timeouts] connect_s``), so an endpoint that takes no connection fails the call fast, provably
unsent. A ``stream_interrupted`` error may come after ``on_text_delta`` received fragments: the
caller retries the whole step and drops what the broken attempt streamed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

import httpx
import pydantic
from opentelemetry import propagate
from pydantic import BaseModel, ConfigDict, Field

from agentrt.server.core import connect_timeout_s
from agentrt.toolhost.logs import register_secret

from ._errors import ModelConfigError, ModelError, ModelPermanentError, ModelTransientError
from ._openai_wire import redact, wire_loads
from ._sse import ServerSentEvent, SSEDecoder
from ._types import ModelResponse

__all__ = [
    "DEFAULT_CONNECT_S",
    "STREAMED",
    "Endpoint",
    "ErrorMapper",
    "HTTPOptions",
    "RequestId",
    "parse_options",
    "read_api_key",
]

logger = logging.getLogger(__name__)

# Option names that suggest someone is putting a secret into the (persisted) options.
_SECRET_OPTIONS = frozenset({"api_key", "apikey", "key", "secret", "token", "password", "authorization"})
_SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "api-key", "x-api-key"})

_Options = TypeVar("_Options", bound=BaseModel)
# How long to wait for the end of a body after the final event (see Endpoint._drain).
_DRAIN_S = 0.25
#: Seconds a call waits for a connection when the runtime names no ``[timeouts] connect_s``.
DEFAULT_CONNECT_S = 5.0


class RequestId:
    """Takes a provider's request id from the headers of its answer, and stamps it on the response.

    Args:
        header: The header carrying it (``x-request-id`` for OpenAI, ``request-id`` for Anthropic).
    """

    def __init__(self, header: str) -> None:
        self.header = header
        self.value = ""

    def take(self, headers: Mapping[str, str]) -> None:
        self.value = str(headers.get(self.header, ""))[:200]

    def stamp(self, response: ModelResponse) -> ModelResponse:
        return dataclasses.replace(response, request_id=self.value) if self.value else response


class _Streamed:
    def __repr__(self) -> str:
        return "STREAMED"


#: What :meth:`Endpoint.post` returns when it fed an event stream to ``on_event``.
STREAMED: Final = _Streamed()


class ErrorMapper(Protocol):
    """Maps a non-2xx answer to an error (the providers' ``error_from_response``)."""

    def __call__(
        self, status_code: int, headers: Mapping[str, str], body: bytes, *, secret: str = ""
    ) -> ModelError: ...


class HTTPOptions(BaseModel):
    """Options every HTTP provider takes; subclasses set the defaults and add their own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str
    api_key_env: str = Field(min_length=1)
    # A file holding the key (a mounted secret); when set it wins over api_key_env.
    api_key_file: str = ""
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    stream: bool = True

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


def parse_options(model: type[_Options], options: Mapping[str, Any], *, provider: str) -> _Options:
    """Validate provider options, refusing anything that looks like a secret.

    Raises:
        ModelConfigError: ``bad_options``; the message never repeats option values.
    """
    secret_options = sorted(name for name in options if name.lower() in _SECRET_OPTIONS)
    if secret_options:
        raise ModelConfigError(
            f"{provider} options must not carry secrets ({', '.join(secret_options)}); put the key in "
            'an environment variable and name it with "api_key_env"',
            reason="bad_options",
        )
    try:
        return model.model_validate(dict(options))
    except pydantic.ValidationError as exc:
        raise ModelConfigError(
            f"invalid options for the {provider} model provider: {_describe(exc)}", reason="bad_options"
        ) from None


MAX_API_KEY_BYTES = 4096


def read_api_key(environ: Mapping[str, str] | None, variable: str, key_file: str = "") -> str:
    """The key from ``key_file`` if given, else from ``variable`` of ``environ`` (or ``os.environ``).

    Raises:
        ModelConfigError: ``missing_api_key`` when the file is unreadable or empty, or the
            variable is unset or empty; ``invalid_api_key`` when the file is binary, not ASCII
            or over ``MAX_API_KEY_BYTES``. The message names the place, never the key.
    """
    if key_file:
        try:
            with Path(key_file).open("rb") as handle:
                # Bounded: a key is short; a huge or endless file must not be read whole.
                raw = handle.read(MAX_API_KEY_BYTES + 1)
        except OSError as exc:
            raise ModelConfigError(
                f"cannot read the API key file {key_file}: {exc.strerror}", reason="missing_api_key"
            ) from None
        if len(raw) > MAX_API_KEY_BYTES:
            raise ModelConfigError(
                f"the API key file {key_file} is longer than {MAX_API_KEY_BYTES} bytes",
                reason="invalid_api_key",
            )
        try:
            api_key = raw.decode("ascii").strip()
        except UnicodeDecodeError:
            api_key = ""
        if api_key and not api_key.isprintable():
            api_key = ""
        if not api_key and raw.strip():
            # Never quote the bytes: they may be a secret in the wrong file.
            raise ModelConfigError(
                f"the API key file {key_file} is not printable ASCII text", reason="invalid_api_key"
            )
        if not api_key:
            raise ModelConfigError(f"the API key file {key_file} is empty", reason="missing_api_key")
        register_secret(api_key)  # never in a log line, whatever carries it there
        return api_key
    env = os.environ if environ is None else environ
    api_key = env.get(variable, "")
    if not api_key:
        raise ModelConfigError(
            f"the API key environment variable {variable} is not set", reason="missing_api_key"
        )
    register_secret(api_key)
    return api_key


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx's default verifying TLS context, built once: building one per client (loading the CA
    bundle) costs about 20 ms and most of a megabyte, and providers come and go with their options."""
    return httpx.create_ssl_context()


def _media_type(response: httpx.Response) -> str:
    content_type: str = response.headers.get("content-type", "")
    return content_type.partition(";")[0].strip().lower()


class Endpoint:
    """One model API base URL with its credentials; safe for concurrent calls.

    Args:
        base_url: API root, without a trailing slash.
        headers: Headers of every request, credentials included.
        timeout_s: Default timeout of a call.
        transport: httpx transport to use instead of the network one.
        secret: The API key, redacted from every message.
        error_from_response: Maps non-2xx answers to errors.
        connect_s: How long a call waits for a connection (never longer than the call's timeout).
    """

    def __init__(
        self,
        *,
        base_url: str,
        headers: Mapping[str, str] | httpx.Headers,
        timeout_s: float,
        transport: httpx.AsyncBaseTransport | None,
        secret: str,
        error_from_response: ErrorMapper,
        connect_s: float = DEFAULT_CONNECT_S,
    ) -> None:
        self._base_url = base_url
        self._secret = secret
        self._error_from_response = error_from_response
        self._connect_s = connect_s
        self._client = httpx.AsyncClient(
            base_url=base_url + "/",
            headers=headers,
            timeout=timeout_s,
            transport=transport,
            follow_redirects=False,
            verify=_tls_context(),
        )

    async def post(
        self,
        path: str,
        body: dict[str, Any],
        *,
        timeout_s: float,
        on_event: Callable[[ServerSentEvent], bool] | None = None,
        on_headers: Callable[[Mapping[str, str]], None] | None = None,
    ) -> Any:
        """Post ``body`` and return the decoded JSON answer, or :data:`STREAMED`.

        Args:
            path: Path under the base URL.
            body: JSON body.
            timeout_s: Bound of the whole call, reading the stream included.
            on_event: For a streaming request: receives each event as it arrives and returns
                ``True`` for the final one. An answer in JSON (a server that does not stream) is
                returned instead.
            on_headers: Receives the headers of a 2xx answer before its body is read (a
                provider's request id).

        Returns:
            The decoded JSON of a 2xx answer, or :data:`STREAMED` once ``on_event`` saw the final event.

        Raises:
            ModelError: As the module docstring maps it; errors ``on_event`` raises pass through.
        """
        if timeout_s <= 0:
            raise ModelTransientError("no time left for the model call", reason="timeout", timed_out=True)
        connect_s = connect_timeout_s(connect_s=self._connect_s, call_timeout_s=timeout_s)
        # httpx bounds each phase (a connection from the pool and its TCP and TLS handshakes within
        # connect_s, then each read and write); asyncio bounds the whole call, the stream included.
        phases = httpx.Timeout(timeout_s, connect=connect_s, pool=connect_s)
        try:
            async with asyncio.timeout(timeout_s):
                return await self._exchange(path, body, phases, on_event, on_headers)
        except (httpx.ConnectTimeout, httpx.PoolTimeout):
            raise ModelTransientError(
                self._unsent(f"no connection within {connect_s:g}s"),
                reason="timeout" if connect_s >= timeout_s else "connection",
                timed_out=connect_s >= timeout_s,
                connect_failed=True,
            ) from None
        except (TimeoutError, httpx.TimeoutException):
            # Whether the request left is not known: the connection may have been made.
            raise ModelTransientError(
                f"model call timed out after {timeout_s:g}s", reason="timeout", timed_out=True
            ) from None

    async def _exchange(
        self,
        path: str,
        body: dict[str, Any],
        phases: httpx.Timeout,
        on_event: Callable[[ServerSentEvent], bool] | None,
        on_headers: Callable[[Mapping[str, str]], None] | None = None,
    ) -> Any:
        try:
            # The chat span's context: a traced provider (or gateway) joins the run's trace.
            trace_headers: dict[str, str] = {}
            propagate.inject(trace_headers)
            async with self._client.stream(
                "POST", path, json=body, timeout=phases, headers=trace_headers
            ) as response:
                if not response.is_success:
                    content = await response.aread()
                    raise self._error_from_response(
                        response.status_code, response.headers, content, secret=self._secret
                    )
                if on_headers is not None:
                    on_headers(response.headers)
                media_type = _media_type(response)
                if on_event is not None and media_type != "application/json":
                    if media_type not in ("text/event-stream", ""):
                        raise ModelPermanentError(
                            f"model endpoint answered a streaming request with {media_type}, "
                            "not an event stream",
                            reason="bad_response",
                            status_code=response.status_code,
                        )
                    await self._read_events(response, on_event)
                    return STREAMED
                content = await response.aread()
        except httpx.UnsupportedProtocol as exc:
            raise ModelConfigError(self._transport_message(exc), reason="bad_options") from None
        except httpx.DecodingError as exc:
            raise ModelPermanentError(self._transport_message(exc), reason="bad_response") from None
        except httpx.TimeoutException:
            raise
        except httpx.ConnectError as exc:
            # Refused, unreachable, a failed TLS handshake: no connection, so nothing was sent.
            raise ModelTransientError(
                self._transport_message(exc) + "; not sent", reason="connection", connect_failed=True
            ) from None
        except httpx.RequestError as exc:
            raise ModelTransientError(self._transport_message(exc), reason="connection") from None
        try:
            return wire_loads(content)
        except ValueError as exc:
            raise ModelPermanentError(
                f"model endpoint returned HTTP {response.status_code} with a body that is not JSON"
                f" within bounds ({exc})",
                reason="bad_response",
                status_code=response.status_code,
            ) from None

    async def _read_events(
        self, response: httpx.Response, on_event: Callable[[ServerSentEvent], bool]
    ) -> None:
        decoder = SSEDecoder()
        chunks = response.aiter_bytes()
        try:
            async for chunk in chunks:
                for event in decoder.feed(chunk):
                    if on_event(event):
                        await self._drain(chunks)
                        return
        except httpx.TimeoutException:
            raise
        except httpx.TransportError as exc:
            detail = str(exc)
            raise self._interrupted(decoder, type(exc).__name__ + (f": {detail}" if detail else "")) from None
        detail = "in the middle of an event" if decoder.pending else "before its final event"
        raise self._interrupted(decoder, f"the stream ended {detail}")

    @staticmethod
    async def _drain(chunks: AsyncIterator[bytes]) -> None:
        # The answer is complete. Reading the end of the body (normally just the last, empty HTTP
        # chunk) lets the connection go back to the pool for the next step; a server that keeps
        # the body open must not hold the call, so the wait is short and any failure is ignored.
        with contextlib.suppress(httpx.HTTPError, TimeoutError):
            async with asyncio.timeout(_DRAIN_S):
                async for _ in chunks:
                    pass

    def _interrupted(self, decoder: SSEDecoder, detail: str) -> ModelTransientError:
        message = f"model stream from {self._base_url} broke off after {decoder.received} bytes: {detail}"
        return ModelTransientError(redact(message, self._secret), reason="stream_interrupted")

    def _unsent(self, detail: str) -> str:
        return redact(f"cannot reach the model endpoint {self._base_url}: {detail}; not sent", self._secret)

    def _transport_message(self, exc: httpx.RequestError) -> str:
        detail = str(exc)
        text = f"cannot reach the model endpoint {self._base_url}: {type(exc).__name__}"
        return redact(text + (f": {detail}" if detail else ""), self._secret)

    async def aclose(self) -> None:
        """Close the HTTP connections; idempotent."""
        await self._client.aclose()
