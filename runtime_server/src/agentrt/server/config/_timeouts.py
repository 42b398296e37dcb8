"""``[timeouts]``: the connect and per-step layers of a call's time (S002 §5).

The per-call layer is the tool's own timeout (``ToolSpec.default_timeout``, else
``tool_timeout_s``) and ``model_timeout_s``; the per-run layer is the run's deadline. See
``core/_deadline.py`` and the README's "Timeout layers".
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["TimeoutsConfig"]


class TimeoutsConfig(BaseModel):
    """Connect and per-step timeouts (0 turns a step layer off)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Establishing a connection to a tool host or a model provider; past it the call fails as
    # provably unsent.
    connect_s: float = Field(5.0, gt=0)
    # A tool call with all its attempts and backoff; 0: bounded by the run's deadline only.
    tool_step_s: float = Field(0.0, ge=0)
    # A model step with its retries; 0: bounded by the run's deadline only.
    model_step_s: float = Field(0.0, ge=0)
    # A cancelled run's bound for its writes in flight (§11.11): how long after the cancel it waits
    # for a write's answer, then its ledger's, before it ends CANCELLED listing the write unknown.
    cancel_wait_s: float = Field(5.0, gt=0)
