"""The outcome of one tool invocation, as recorded in the ledger and sent back."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from agentrt.toolhost._errors import ErrorCode, ToolError

__all__ = ["Failure", "Outcome"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Failure:
    """A typed tool failure (``agentrt.toolhost.v1.ToolError``)."""

    code: ErrorCode
    message: str
    details_json: str = ""

    @classmethod
    def of(cls, code: ErrorCode, message: str, details: Mapping[str, Any] | None = None) -> Failure:
        """Build a failure, serialising ``details`` to JSON text."""
        return cls(code=code, message=message, details_json=json.dumps(dict(details)) if details else "")

    @classmethod
    def from_error(cls, error: ToolError) -> Failure:
        """Build the failure a tool reported by raising ``error``."""
        try:
            details_json = json.dumps(error.details) if error.details else ""
        except (TypeError, ValueError):
            # A plugin bug must not hide the error itself.
            details_json = json.dumps({"details": repr(error.details)})
        return cls(code=error.code, message=error.message, details_json=details_json)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Outcome:
    """Exactly one of a JSON result or a :class:`Failure`."""

    result_json: str | None = None
    failure: Failure | None = None

    def __post_init__(self) -> None:
        if (self.result_json is None) == (self.failure is None):
            raise ValueError("an outcome has exactly one of result_json and failure")

    @classmethod
    def success(cls, result_json: str) -> Outcome:
        """A result."""
        return cls(result_json=result_json)

    @classmethod
    def error(cls, code: ErrorCode, message: str, details: Mapping[str, Any] | None = None) -> Outcome:
        """A failure."""
        return cls(failure=Failure.of(code, message, details))

    @property
    def effect_unknown(self) -> bool:
        """The host stopped the tool where it stood: whether its effect happened is not known."""
        if self.failure is None or not self.failure.details_json:
            return False
        try:
            details = json.loads(self.failure.details_json)
        except ValueError:
            return False
        return isinstance(details, dict) and details.get("effect") == "unknown"

    @property
    def retryable(self) -> bool:
        """True when a retry with the same key runs the tool again (TRANSIENT, CANCELLED, UNAUTHORIZED)."""
        return self.failure is not None and self.failure.code.retryable
