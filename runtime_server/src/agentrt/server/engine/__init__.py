"""Engine: workers, leases and step execution around the pure core."""

from __future__ import annotations

from agentrt.server.core import STATE_VERSION
from agentrt.server.engine._agents import (
    RUNTIME_VERSION,
    BoundModel,
    ResolvedAgent,
    bind_model,
    effective_budgets,
    sensitive_option,
)
from agentrt.server.engine._engine import Engine, new_run_id
from agentrt.server.engine._ports import Ports, StartRequest
from agentrt.server.engine._retention import (
    LEDGER_RECONCILE_HORIZON_S,
    PAYLOADS_DIR,
    RetentionJob,
    build_pruner,
    ledger_keep_bound_s,
)

__all__ = [
    "LEDGER_RECONCILE_HORIZON_S",
    "PAYLOADS_DIR",
    "RUNTIME_VERSION",
    "STATE_VERSION",
    "BoundModel",
    "Engine",
    "Ports",
    "ResolvedAgent",
    "RetentionJob",
    "StartRequest",
    "bind_model",
    "build_pruner",
    "effective_budgets",
    "ledger_keep_bound_s",
    "new_run_id",
    "sensitive_option",
]
