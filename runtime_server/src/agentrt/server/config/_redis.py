"""``[redis]``: the cross-replica fan-out of live events and signals (R10.1), off by default.

``url = ""`` keeps the in-process bus (the embedded default: no Redis needed). A ``redis://``
or ``rediss://`` (TLS) URL turns the fan-out on. The URL never carries a secret: the ACL user is
``username`` and its password comes from ``password_file`` or the variable named by
``password_env``, so nothing printed from the config (errors, logs) can show it.
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["RedisConfig"]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PREFIX = re.compile(r"[A-Za-z0-9_.:{}-]{1,64}")


class RedisConfig(BaseModel):
    """Where Redis is, who we are to it, and how patiently we wait for it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = ""  # redis://HOST:PORT[/DB] or rediss://...; "" keeps the in-process bus
    username: str = ""  # the ACL user; "" is Redis's default user
    password_file: str = ""  # a file holding the password (trailing newline ignored)
    password_env: str = ""  # or the name of an environment variable holding it
    ca_file: str = ""  # rediss://: CA bundle that signed the server's certificate ("" = system CAs)
    cert_file: str = ""  # rediss://: client certificate, for servers that require one
    key_file: str = ""
    key_prefix: str = "agentrt:"  # every channel name starts with it (ACL channel patterns: &agentrt:*)
    connect_timeout_s: float = Field(2.0, gt=0, le=60)
    # A command (publish, ping) that takes longer marks Redis down: the store takes over.
    command_timeout_s: float = Field(2.0, gt=0, le=60)
    health_interval_s: float = Field(1.0, gt=0, le=60)  # ping period: how fast a partition is seen
    reconnect_base_s: float = Field(0.1, gt=0, le=60)
    reconnect_cap_s: float = Field(5.0, gt=0, le=600)
    # Messages waiting to go out; past it new ones are dropped (the store still has every fact).
    max_pending_messages: int = Field(10_000, ge=1, le=1_000_000)
    # "global": [tool_limits] hold over all replicas, counted in Redis (tools/_shared_slots);
    # "process": each replica counts its own calls.
    tool_limits: Literal["process", "global"] = "process"
    slot_lease_s: float = Field(30.0, ge=1, le=3600)  # a killed replica's slots free up after it

    @property
    def enabled(self) -> bool:
        return bool(self.url)

    @property
    def tls(self) -> bool:
        return self.url.startswith("rediss://")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value:
            return value
        try:
            parts = urlsplit(value)
            port = parts.port
        except ValueError:
            raise ValueError("redis.url is not a valid URL") from None
        if parts.scheme not in ("redis", "rediss"):
            raise ValueError("redis.url must start with redis:// or rediss:// (TLS)")
        if parts.password is not None or parts.username:
            # Never echo the URL: it may hold the very secret this refuses.
            raise ValueError(
                "redis.url may not carry a user or password: use redis.username and "
                "redis.password_file or redis.password_env"
            )
        if not parts.hostname:
            raise ValueError("redis.url names no host")
        if parts.query or parts.fragment:
            raise ValueError("redis.url takes no query or fragment: use the [redis] keys")
        path = parts.path.strip("/")
        if path and not path.isdigit():
            raise ValueError(f"redis.url path must be a database number, not {path!r}")
        if port is not None and not 0 < port < 65536:
            raise ValueError("redis.url port is out of range")
        return value

    @field_validator("password_env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        if value and not _ENV_NAME.fullmatch(value):
            raise ValueError(f"redis.password_env {value!r} is not an environment variable name")
        return value

    @field_validator("key_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not _PREFIX.fullmatch(value):
            raise ValueError("redis.key_prefix must be 1-64 characters of letters, digits and _ . : { } -")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> RedisConfig:
        if self.password_file and self.password_env:
            raise ValueError("redis: set password_file or password_env, not both")
        tls_files = [n for n in ("ca_file", "cert_file", "key_file") if getattr(self, n)]
        if tls_files and not self.tls:
            raise ValueError(f"redis: {', '.join(tls_files)} need a rediss:// url (TLS)")
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("redis: cert_file and key_file go together")
        if self.reconnect_cap_s < self.reconnect_base_s:
            raise ValueError("redis: reconnect_cap_s is below reconnect_base_s")
        return self
