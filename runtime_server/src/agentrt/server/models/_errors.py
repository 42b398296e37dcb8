"""Errors raised by model providers.

The class says what the engine may do about the error; ``reason`` says precisely what happened::

    ModelError                  kind        engine's reaction
    ├── ModelTransientError     transient   retry by policy, after retry_after_s when set
    │                                       (429 rate limit, 5xx, 529 overloaded, connection
    │                                       errors, timeouts; stream_interrupted: a stream broke
    │                                       off, so the text deltas of the attempt are void);
    │                                       typed facts: timed_out, connect_failed
    ├── ModelPermanentError     permanent   fail the step; retrying the same request cannot help
    │                                       (400, context length exceeded, bad response shape)
    ├── ModelAuthError          auth        fail or pause the run until credentials are fixed
    │                                       (401, 403)
    └── ModelConfigError        config      fail the run; the agent's model spec is wrong
                                            (unknown provider, bad options, missing API key env var)

Messages never contain API keys: providers redact them before raising. What an error means is read
from its class and typed fields (``reason``, ``status_code``, ``timed_out``, ``connect_failed``),
never from its message.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "ModelAuthError",
    "ModelConfigError",
    "ModelError",
    "ModelPermanentError",
    "ModelTransientError",
]


class ModelError(Exception):
    """Base of every error a model provider raises.

    Attributes:
        kind: Category, one of ``transient``, ``permanent``, ``auth``, ``config``.
        reason: Stable, specific reason, e.g. ``rate_limited``, ``timeout``, ``context_length_exceeded``.
        message: Details for people; never contains secrets.
        retry_after_s: Seconds the provider asked to wait before a retry, if it said so.
        status_code: HTTP status of the provider's answer, if there was one.
    """

    kind: ClassVar[str] = "error"
    #: Whether retrying the same request later may succeed.
    retryable: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        retry_after_s: float | None = None,
        status_code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason or self.kind
        self.retry_after_s = retry_after_s
        self.status_code = status_code

    def __repr__(self) -> str:
        extra = "".join(
            f", {name}={value!r}"
            for name, value in (("retry_after_s", self.retry_after_s), ("status_code", self.status_code))
            if value is not None
        )
        return f"{type(self).__name__}({self.message!r}, reason={self.reason!r}{extra})"

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only fields would be lost by Exception's default pickling (cls(*args)).
        return (
            _rebuild,
            (type(self), self.message, self.reason, self.retry_after_s, self.status_code),
        )


def _rebuild(
    cls: type[ModelError], message: str, reason: str, retry_after_s: float | None, status_code: int | None
) -> ModelError:
    return cls(message, reason=reason, retry_after_s=retry_after_s, status_code=status_code)


class ModelTransientError(ModelError):
    """A failure that may go away: rate limit, server error, connection error, timeout.

    Args:
        timed_out: The call's own timeout fired (``request.timeout_s``), while connecting or after.
        connect_failed: No connection was made (refused, unreachable, or not made within the
            connect layer, ``[timeouts] connect_s``): the request provably never left. Left False
            whenever that cannot be proven, e.g. when the call's own timeout cut a connect short.
    """

    kind = "transient"
    retryable = True

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        retry_after_s: float | None = None,
        status_code: int | None = None,
        timed_out: bool = False,
        connect_failed: bool = False,
    ) -> None:
        super().__init__(message, reason=reason, retry_after_s=retry_after_s, status_code=status_code)
        self.timed_out = timed_out
        self.connect_failed = connect_failed

    def __repr__(self) -> str:
        facts = "".join(
            f", {name}=True"
            for name, value in (("timed_out", self.timed_out), ("connect_failed", self.connect_failed))
            if value
        )
        return super().__repr__()[:-1] + facts + ")"

    def __reduce__(self) -> tuple[object, ...]:
        return (
            _rebuild_transient,
            (
                type(self),
                self.message,
                self.reason,
                self.retry_after_s,
                self.status_code,
                self.timed_out,
                self.connect_failed,
            ),
        )


def _rebuild_transient(
    cls: type[ModelTransientError],
    message: str,
    reason: str,
    retry_after_s: float | None,
    status_code: int | None,
    timed_out: bool,
    connect_failed: bool,
) -> ModelTransientError:
    return cls(
        message,
        reason=reason,
        retry_after_s=retry_after_s,
        status_code=status_code,
        timed_out=timed_out,
        connect_failed=connect_failed,
    )


class ModelPermanentError(ModelError):
    """The provider rejected the request, or answered something unusable; a retry cannot help."""

    kind = "permanent"


class ModelAuthError(ModelError):
    """The provider refused the credentials (HTTP 401/403)."""

    kind = "auth"


class ModelConfigError(ModelError):
    """The model spec is wrong: unknown provider, bad options, missing API key env var."""

    kind = "config"
