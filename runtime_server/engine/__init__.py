"""Engine: workers, leases and step execution around the pure core."""

from __future__ import annotations

from runtime_server.core import STATE_VERSION
from runtime_server.engine._agents import (
    RUNTIME_VERSION,
    BoundModel,
    ResolvedAgent,
    bind_model,
    effective_budgets,
    sensitive_option,
)
from runtime_server.engine._engine import Engine, StartRequest, new_run_id

__all__ = [
    "RUNTIME_VERSION",
    "STATE_VERSION",
    "BoundModel",
    "Engine",
    "ResolvedAgent",
    "StartRequest",
    "bind_model",
    "effective_budgets",
    "new_run_id",
    "sensitive_option",
]
