"""Errors of the tool host and its plugin SDK.

Tools raise :class:`ToolError` subclasses to return a typed failure; the host
turns each one into a ``ToolError`` message with the matching
``ToolErrorCode``. Any other exception a tool raises becomes PERMANENT with
the exception's type and message (never its traceback).

Startup problems (a plugin that fails to load, two plugins serving one tool
name) raise :class:`PluginError`.

Error tree::

    Exception
    ├── ToolError                 code=PERMANENT unless given
    │   ├── InvalidInput          INVALID_INPUT: back to the model, never retried
    │   ├── Unauthorized          UNAUTHORIZED: the run fails or pauses
    │   ├── TransientError        TRANSIENT: the runtime may retry with the same key
    │   ├── PermanentError        PERMANENT: retrying cannot help
    │   └── ToolCancelled         CANCELLED: the tool stopped because it was cancelled
    └── PluginError               a plugin could not be loaded or registered
        └── DuplicateToolError    two plugins (or one, twice) serve the same tool name
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

__all__ = [
    "DuplicateToolError",
    "ErrorCode",
    "InvalidInput",
    "PermanentError",
    "PluginError",
    "ToolCancelled",
    "ToolError",
    "TransientError",
    "Unauthorized",
]


class ErrorCode(enum.Enum):
    """Failure classes of a tool call; mirrors ``agentrt.toolhost.v1.ToolErrorCode``."""

    INVALID_INPUT = "INVALID_INPUT"
    UNAUTHORIZED = "UNAUTHORIZED"
    TRANSIENT = "TRANSIENT"
    PERMANENT = "PERMANENT"
    CANCELLED = "CANCELLED"
    UNKNOWN_TOOL = "UNKNOWN_TOOL"
    KEY_CONFLICT = "KEY_CONFLICT"
    FENCED = "FENCED"
    NOT_ALLOWED = "NOT_ALLOWED"  # set by the runtime: the agent was not given the tool
    RESULT_TOO_LARGE = "RESULT_TOO_LARGE"  # the result passed the hard maximum; the effect may have landed

    @property
    def retryable(self) -> bool:
        """True when a retry with the same idempotency key runs the tool again.

        UNAUTHORIZED too: the tool did nothing, and a runtime whose run paused for a person sends
        the same call again once its authority is fixed.
        """
        return self in (ErrorCode.TRANSIENT, ErrorCode.CANCELLED, ErrorCode.UNAUTHORIZED)


class ToolError(Exception):
    """A typed failure a tool returns by raising it.

    Args:
        message: Human readable message; the model sees it for INVALID_INPUT and PERMANENT.
        details: Optional JSON-able structured details, sent as ``details_json``.
        code: Failure class; subclasses fix it, the base class defaults to PERMANENT.
    """

    code: ErrorCode = ErrorCode.PERMANENT

    def __init__(
        self,
        message: str = "",
        *,
        details: Mapping[str, Any] | None = None,
        code: ErrorCode | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = dict(details) if details else {}
        if code is not None:
            self.code = code


class InvalidInput(ToolError):
    """The arguments are wrong in a way the schema could not express."""

    code = ErrorCode.INVALID_INPUT


class Unauthorized(ToolError):
    """The caller lacks permission for this call."""

    code = ErrorCode.UNAUTHORIZED


class TransientError(ToolError):
    """A retry may succeed: a dependency is down, or the deadline passed before any effect."""

    code = ErrorCode.TRANSIENT


class PermanentError(ToolError):
    """Retrying cannot help (e.g. the record does not exist)."""

    code = ErrorCode.PERMANENT


class ToolCancelled(ToolError):
    """The tool saw its cancellation signal and stopped."""

    code = ErrorCode.CANCELLED


class PluginError(Exception):
    """A plugin could not be loaded, validated or asked for its tools.

    Args:
        message: What went wrong, naming the plugin.
        plugin: Name of the plugin at fault, when known.
    """

    def __init__(self, message: str, *, plugin: str | None = None) -> None:
        super().__init__(message)
        self.plugin = plugin


class DuplicateToolError(PluginError):
    """Two plugins (or one plugin twice) provide the same tool name.

    Args:
        tool: The tool name.
        first_plugin: The plugin that registered it first.
        second_plugin: The plugin that registered it again.
    """

    def __init__(self, *, tool: str, first_plugin: str, second_plugin: str) -> None:
        if first_plugin == second_plugin:
            message = f"tool {tool!r} is provided twice by plugin {first_plugin!r}"
        else:
            message = (
                f"tool {tool!r} is provided by both plugin {first_plugin!r} and plugin {second_plugin!r}"
            )
        super().__init__(message, plugin=second_plugin)
        self.tool = tool
        self.first_plugin = first_plugin
        self.second_plugin = second_plugin
