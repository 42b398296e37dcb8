"""``http_listen`` and ``[http]``: what the HTTP face refuses at start (api/_http_server, config/_http)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agentrt.server.api._http_server import check_http_auth
from agentrt.server.api._server import _authentication
from agentrt.server.config import ConfigError, HttpConfig, Settings


@pytest.mark.parametrize(
    "origin",
    [
        "*",
        "https://*.example.com",
        "https://app.example.com/",
        "https://app.example.com/x",
        "ftp://a.b",
        "app.com",
    ],
)
def test_cors_origins_must_be_exact(origin: str) -> None:
    with pytest.raises(ValidationError, match="exact origin"):
        HttpConfig(cors_origins=[origin])


def test_exact_origins_and_defaults() -> None:
    assert HttpConfig(cors_origins=["https://app.example.com:8443", "http://localhost:3000"]).cors_origins
    default = HttpConfig()
    assert default.cors_origins == [] and default.sse_query_token is False
    assert Settings().http_listen == ""


def test_http_listen_must_be_host_port() -> None:
    with pytest.raises(ValidationError, match="HOST:PORT"):
        Settings(http_listen="8080")


def test_a_non_loopback_http_listen_needs_tls_and_auth() -> None:
    settings = Settings(http_listen="0.0.0.0:8080")
    with pytest.raises(ConfigError, match="without TLS and authentication"):
        _authentication(settings.model_copy(update={"listen": settings.http_listen}))


def test_mtls_only_auth_is_refused_for_the_http_face() -> None:
    settings = Settings.model_validate(
        {
            "http_listen": "127.0.0.1:8080",
            "tls": {"cert_file": "c.pem", "key_file": "k.pem", "client_ca_file": "ca.pem"},
            "auth": {"mtls": {"client-a": {"tenant": "acme", "roles": ["runner"]}}},
        }
    )
    with pytest.raises(ConfigError, match="gRPC only"):
        check_http_auth(settings)
