"""The ``[mcp]`` and ``[mcp_servers.<id>]`` tables of the tool host's ``--config`` TOML file.

Shape (the ``mcpServers`` shape other clients use)::

    [mcp]
    allowed_urls = ["https://mcp.example.com"]   # origins a remote server may be at

    [mcp_servers.files]                           # stdio: the host runs and supervises it
    command = "python"
    args = ["-m", "files_server"]
    env = { ROOT = "/srv/files" }

    [mcp_servers.github]                          # Streamable HTTP
    url = "https://mcp.example.com/mcp"
    headers = { Authorization = "env:GITHUB_MCP_AUTH" }   # env:NAME or file:PATH
    effect = "write"                              # a server-wide override
    [mcp_servers.github.tools.create_issue]
    requires_approval = true
    approved_versions = ["3f1c..."]               # the rug-pull pin
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pydantic

__all__ = [
    "Effect",
    "McpConfig",
    "McpConfigError",
    "McpSettings",
    "ServerConfig",
    "ToolConfig",
    "ToolOverride",
    "load_config",
    "resolve_headers",
]

_ID_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
# Header names whose literal value would be a secret in the config file: they must be references.
_SENSITIVE = re.compile(r"auth|token|key|secret|cookie|password|session", re.IGNORECASE)
MAX_SERVERS = 64


class McpConfigError(ValueError):
    """The MCP configuration is invalid; the message names the key and never a secret's value."""


class Effect(enum.Enum):
    """An operator's override of a tool's effect class."""

    READ_ONLY = "read_only"
    WRITE = "write"
    DESTRUCTIVE = "destructive"


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)


class ToolOverride(_Strict):
    """Per-server or per-tool overrides of what the annotations say."""

    effect: Effect | None = None
    idempotent: bool | None = None
    requires_approval: bool | None = None
    timeout_s: float | None = pydantic.Field(default=None, gt=0, le=3600)


class ToolConfig(ToolOverride):
    """One tool's overrides and its pin: the definition hashes an operator approved."""

    approved_versions: tuple[str, ...] | None = None


class ServerConfig(ToolOverride):
    """One ``[mcp_servers.<id>]`` table: stdio (``command``) or Streamable HTTP (``url``)."""

    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = pydantic.Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = pydantic.Field(default_factory=dict)
    tools: dict[str, ToolConfig] = pydantic.Field(default_factory=dict)
    connect_timeout_s: float = pydantic.Field(default=30.0, gt=0, le=600)
    max_tools: int = pydantic.Field(default=256, ge=1, le=4096)

    @pydantic.model_validator(mode="after")
    def _one_transport(self) -> ServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of command (stdio) and url (Streamable HTTP)")
        if self.url is None and self.headers:
            raise ValueError("headers are for a url server")
        if self.command is not None and not self.command.strip():
            raise ValueError("command must not be empty")
        for name, value in self.headers.items():
            if not _is_reference(value) and _SENSITIVE.search(name):
                raise ValueError(
                    f"header {name!r} must be a reference (env:NAME or file:PATH), not a literal value"
                )
        return self

    @property
    def transport(self) -> str:
        """``stdio`` or ``http``."""
        return "stdio" if self.command is not None else "http"


class McpSettings(_Strict):
    """The ``[mcp]`` table: settings of every MCP server."""

    allowed_urls: tuple[str, ...] = ()


class McpConfig(_Strict):
    """The validated MCP configuration of a host."""

    settings: McpSettings = McpSettings()
    servers: dict[str, ServerConfig] = pydantic.Field(default_factory=dict)


def _is_reference(value: str) -> bool:
    return value.startswith(("env:", "file:"))


def _origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise McpConfigError(f"{url!r} is not an http(s) URL")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, parts.hostname.lower(), port


def load_config(file: Mapping[str, Any]) -> McpConfig:
    """Validate the ``mcp`` and ``mcp_servers`` tables of a parsed host config file.

    Args:
        file: The whole parsed TOML file (other tables are ignored).

    Returns:
        The configuration; no server when the file has no ``mcp_servers`` table.

    Raises:
        McpConfigError: A table or value is invalid: the message names the key; a URL outside
            ``mcp.allowed_urls``, or one carrying credentials, is refused.
    """
    servers_raw = file.get("mcp_servers", {})
    if not isinstance(servers_raw, Mapping):
        raise McpConfigError("mcp_servers must be a table of [mcp_servers.<id>] tables")
    if len(servers_raw) > MAX_SERVERS:
        raise McpConfigError(f"mcp_servers: at most {MAX_SERVERS} servers")
    try:
        settings = McpSettings.model_validate(file.get("mcp", {}))
    except pydantic.ValidationError as exc:
        raise McpConfigError(f"[mcp]: {_first_error(exc)}") from None
    allowed = set()
    for entry in settings.allowed_urls:
        try:
            allowed.add(_origin(entry))
        except McpConfigError as exc:
            raise McpConfigError(f"mcp.allowed_urls: {exc}") from None
    servers: dict[str, ServerConfig] = {}
    for server_id, raw in servers_raw.items():
        if not isinstance(server_id, str) or not _ID_RE.match(server_id):
            raise McpConfigError(
                f"mcp_servers.{server_id}: a server id is a letter or _ then letters, digits, _ or -"
            )
        try:
            server = ServerConfig.model_validate(raw)
        except pydantic.ValidationError as exc:
            raise McpConfigError(f"mcp_servers.{server_id}: {_first_error(exc)}") from None
        if server.url is not None:
            parts = urlsplit(server.url)
            if parts.username or parts.password:
                raise McpConfigError(
                    f"mcp_servers.{server_id}.url: no credentials in the URL; use headers = {{...}} "
                    "with an env: or file: reference"
                )
            try:
                origin = _origin(server.url)
            except McpConfigError as exc:
                raise McpConfigError(f"mcp_servers.{server_id}.url: {exc}") from None
            if origin not in allowed:
                raise McpConfigError(
                    f"mcp_servers.{server_id}.url: {origin[0]}://{origin[1]}:{origin[2]} is not in "
                    "mcp.allowed_urls"
                )
        servers[server_id] = server
    return McpConfig(settings=settings, servers=servers)


def _first_error(exc: pydantic.ValidationError) -> str:
    # Location and message only: never the input, which may be a header value.
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"])
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where + ': ' if where else ''}{first['msg']}{more}"


def resolve_headers(
    server_id: str, headers: Mapping[str, str], *, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Resolve ``env:NAME`` and ``file:PATH`` header values; literal values pass unchanged.

    Raises:
        McpConfigError: A variable is unset or a file unreadable (named; the value never shown).
    """
    env = os.environ if env is None else env
    resolved: dict[str, str] = {}
    for name, value in headers.items():
        if value.startswith("env:"):
            variable = value.removeprefix("env:")
            if variable not in env:
                raise McpConfigError(
                    f"mcp_servers.{server_id}.headers.{name}: environment variable {variable} is not set"
                )
            resolved[name] = env[variable]
        elif value.startswith("file:"):
            path = Path(value.removeprefix("file:"))
            try:
                resolved[name] = path.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise McpConfigError(
                    f"mcp_servers.{server_id}.headers.{name}: cannot read {path}: {exc.strerror}"
                ) from None
        else:
            resolved[name] = value
    return resolved
