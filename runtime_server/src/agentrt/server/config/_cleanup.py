"""``[cleanup]``: how a run releases what it registered when it ends (S002 §8).

A run's cleanups run newest first when its end is decided, each with up to ``attempts``
attempts of at most ``call_timeout_s`` each, all within ``deadline_s`` of the first attempt
(the run's own deadline may have passed: cleanups have their own). A cleanup that fails for
good leaves the run's cleanup status UNKNOWN; the background job retries it every
``retry_interval_s``, doubling to ``retry_cap_s``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CleanupConfig"]


class CleanupConfig(BaseModel):
    """Attempts, timeouts and the background retry of cleanups."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    attempts: int = Field(3, ge=1, le=20)
    call_timeout_s: float = Field(10.0, gt=0)
    deadline_s: float = Field(60.0, gt=0)
    retry_interval_s: float = Field(30.0, gt=0)
    retry_cap_s: float = Field(3600.0, gt=0)
    # How many runs with unknown cleanups one pass of the background job takes at most.
    batch: int = Field(20, ge=1, le=500)
