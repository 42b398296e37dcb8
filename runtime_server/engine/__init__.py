"""Engine: workers, leases and step execution around the pure core."""

from __future__ import annotations

from runtime_server.core import STATE_VERSION
from runtime_server.engine._agents import RUNTIME_VERSION, ResolvedAgent, effective_budgets
from runtime_server.engine._engine import Engine, StartRequest, new_run_id

__all__ = [
    "RUNTIME_VERSION",
    "STATE_VERSION",
    "Engine",
    "ResolvedAgent",
    "StartRequest",
    "effective_budgets",
    "new_run_id",
]
