"""Settings that keep one caller, model or tool from hurting others (DESIGN R8.2, R8.4, R10.4, §11.8).

Sizes are bytes; times are seconds. Each group is one section of the config file.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, model_validator

__all__ = [
    "AdmissionConfig",
    "FaultsConfig",
    "ModelCacheConfig",
    "PayloadsConfig",
    "RetentionConfig",
    "StreamsConfig",
    "ToolLimitsConfig",
]

MiB = 1024 * 1024
_Cap = Annotated[int, Field(ge=0, strict=True)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FaultsConfig(_Strict):
    """Unexpected errors while driving a run: each is a run.fault; past max_faults the run fails
    (or, with a write in doubt, parks in UNKNOWN_OUTCOME).

    Environmental faults (the database, the network, the OS) are retried with backoff and not
    counted, until one run's streak of them (reset by each commit) lasts ``environmental_retry_s``.
    """

    max_faults: int = Field(3, ge=1)
    environmental_retry_s: float = Field(300.0, gt=0)


class PayloadsConfig(_Strict):
    """Values stored once outside the events (R8.4) and the hard maxima per kind."""

    inline_max_bytes: int = Field(64 * 1024, ge=1024, le=1 * MiB)  # larger values become payloads
    store: Literal["db", "file"] = "db"  # file: under data_dir/payloads
    chunk_bytes: int = Field(256 * 1024, ge=1024, le=2 * MiB)  # GetPayload chunk size
    max_tool_result_bytes: int = Field(64 * MiB, ge=1024)
    max_model_output_bytes: int = Field(8 * MiB, ge=1024)
    # What the model sees of a tool result larger than model_view_max_bytes: a truncated result with
    # an explicit marker, or a failed call. The full result stays retrievable with GetPayload.
    oversized_result: Literal["truncate", "fail"] = "truncate"
    # At most 1 MiB: the view is stored inline in the event, which must stay far below the 4 MiB
    # response cap.
    model_view_max_bytes: int = Field(64 * 1024, ge=1024, le=1 * MiB)


class AdmissionConfig(_Strict):
    """How many runs may wait and run; over a limit StartRun/RunAgent answer RESOURCE_EXHAUSTED."""

    max_queued_runs: int = Field(10_000, ge=1)  # all tenants
    max_queued_runs_per_tenant: int = Field(1_000, ge=1)
    max_active_runs_per_tenant: int = Field(1_000, ge=1)  # not yet ended, queued included
    retry_after_s: float = Field(1.0, gt=0, le=3600)


class ToolLimitsConfig(_Strict):
    """Global per-tool concurrency in this runtime; calls past it queue instead of overloading a host."""

    # tool name -> slots (0: no limit, even if the ToolSpec declares one); overrides the ToolSpec
    max_concurrent_calls: dict[str, NonNegativeInt] = Field(default_factory=dict)
    default_max_concurrent_calls: int = Field(0, ge=0)  # 0: unlimited unless the ToolSpec says
    # A cap per (tool, tenant) under the tool's limit, so one tenant's burst cannot take every slot
    # of a slow tool: tool name -> calls of one tenant at once (0: no cap), else the default. Strict
    # ints: TOML's `true` would otherwise pass as a cap of 1.
    max_concurrent_calls_per_tenant: dict[str, _Cap] = Field(default_factory=dict)
    default_max_concurrent_calls_per_tenant: _Cap = 0  # 0: no per-tenant cap (the default)


class StreamsConfig(_Strict):
    """Per-follower buffers: a follower that does not read is paused, then dropped."""

    follower_buffer_events: int = Field(256, ge=8)
    follower_buffer_bytes: int = Field(4 * MiB, ge=64 * 1024)
    stall_timeout_s: float = Field(30.0, gt=0)  # a full buffer this long ends the stream


class ModelCacheConfig(_Strict):
    """Model providers (each with its HTTP client) are kept in a bounded LRU."""

    max_providers: int = Field(64, ge=1)


class RetentionConfig(_Strict):
    """Pruning of ended runs' events, payloads and checkpoints (the run row stays as a tombstone)."""

    ended_after_s: float | None = Field(None, gt=0, allow_inf_nan=False)  # None: keep forever
    per_tenant: dict[str, float] = Field(default_factory=dict)  # tenant -> ended_after_s
    interval_s: float = Field(3600.0, gt=0, allow_inf_nan=False)
    batch_size: int = Field(500, ge=1, le=10_000)

    @model_validator(mode="after")
    def _positive_ages(self) -> RetentionConfig:
        bad = sorted(t for t, age in self.per_tenant.items() if not (math.isfinite(age) and age > 0))
        if bad:
            raise ValueError(f"retention.per_tenant ages must be finite and > 0 (tenants {bad[:5]})")
        return self
