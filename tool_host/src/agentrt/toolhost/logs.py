"""Structured, redacted logs shared by the tool host and the runtime (see ``_logging``)."""

from __future__ import annotations

from agentrt.toolhost._logging import (
    CONTEXT_FIELDS,
    FORMAT_ENV,
    REDACTED,
    JsonFormatter,
    LogFormat,
    Redactor,
    TextFormatter,
    bind_log_fields,
    check_level,
    configure_logging,
    current_log_fields,
    log_fields,
    parse_level_spec,
    redactor,
    register_secret,
    resolve_format,
)

__all__ = [
    "CONTEXT_FIELDS",
    "FORMAT_ENV",
    "REDACTED",
    "JsonFormatter",
    "LogFormat",
    "Redactor",
    "TextFormatter",
    "bind_log_fields",
    "check_level",
    "configure_logging",
    "current_log_fields",
    "log_fields",
    "parse_level_spec",
    "redactor",
    "register_secret",
    "resolve_format",
]
