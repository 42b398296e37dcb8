"""``[http]``: the HTTP/JSON (Connect) and SSE face of the runtime API, next to gRPC.

Off by default: ``http_listen = "127.0.0.1:8080"`` (or ``--http-listen``) serves it. It follows the
gRPC listen's rules (TLS and authentication off loopback, unless ``--insecure``), with the same
``[tls]`` files and ``[auth]``. CORS is off until ``cors_origins`` lists exact origins; a bearer
token in the SSE route's query string (for a browser's ``EventSource``, which cannot set headers)
is refused unless ``sse_query_token`` allows it.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["HttpConfig"]


class HttpConfig(BaseModel):
    """How the HTTP face answers browsers and event streams."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Exact origins ("https://console.example.com") allowed to call from a browser; [] is no CORS.
    cors_origins: list[str] = Field(default_factory=list, max_length=100)
    # How long preflight answers may be cached by the browser.
    cors_max_age_s: int = Field(600, ge=0, le=86_400)
    # A ": keepalive" comment on an idle SSE stream this often, so proxies keep it open.
    sse_heartbeat_s: float = Field(15.0, gt=0, le=3600)
    # Allow ?access_token= on GET /v1/runs/{id}/events only (EventSource sends no headers). Off:
    # a URL ends up in proxy logs and browser history. Never logged by the runtime either way.
    sse_query_token: bool = False

    @field_validator("cors_origins")
    @classmethod
    def _exact_origins(cls, values: list[str]) -> list[str]:
        for value in values:
            parts = urlsplit(value)
            exact = (
                parts.scheme in ("http", "https")
                and bool(parts.hostname)
                and not parts.path
                and not parts.query
                and not parts.fragment
                and not parts.username
                and "*" not in value
            )
            if not exact:
                raise ValueError(
                    f"cors_origins: {value!r} is not an exact origin like https://app.example.com "
                    "(scheme, host and optional port; no wildcard, path or trailing slash)"
                )
        return values
