"""``[logging]``: how the runtime logs (format, levels per logger, extra sensitive fields).

``agentrt serve --log-format`` / ``--log-level`` and ``AGENTRT_LOG_FORMAT`` override these;
see ``agentrt.server.telemetry._logging``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentrt.toolhost.logs import check_level

__all__ = ["LoggingConfig"]


class LoggingConfig(BaseModel):
    """Log lines on stderr: text or JSON, redacted either way."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["json", "text"] = "text"
    level: str = "WARNING"  # the root logger's; --log-level replaces it
    # Logger name -> level, e.g. {"agentrt.run" = "INFO", "grpc" = "WARNING"}.
    levels: dict[str, str] = Field(default_factory=dict)
    # Field names (case-insensitive) whose values never reach a line, on top of the built-in
    # ones (password, token, api_key, authorization, grant, ...).
    redact_fields: list[str] = Field(default_factory=list)

    @field_validator("level")
    @classmethod
    def _level(cls, value: str) -> str:
        return check_level(value)

    @field_validator("levels")
    @classmethod
    def _levels(cls, value: dict[str, str]) -> dict[str, str]:
        if any(not name.strip() for name in value):
            raise ValueError("a logger name is empty")
        return {name: check_level(level) for name, level in value.items()}
