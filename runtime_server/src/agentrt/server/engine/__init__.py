"""Engine: workers, leases and step execution around the pure core.

Its ports (``RunLog``, ``ToolPort``, ``ModelPort``...) are the seams where ``agentrt.testing``
puts its fakes, and ``drive_contained`` with a ``RunHandle`` drives one run through them: the
testing package uses nothing else of the engine.
"""

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
from agentrt.server.engine._contain import drive_contained
from agentrt.server.engine._engine import Engine, new_run_id
from agentrt.server.engine._faults import FaultPlan, InjectedFault
from agentrt.server.engine._ports import (
    ChildRuns,
    Counters,
    Fresh,
    LiveEvents,
    ModelPort,
    PayloadPort,
    PolicyPort,
    Ports,
    RunLog,
    StartRequest,
    ToolPort,
)
from agentrt.server.engine._retention import (
    LEDGER_RECONCILE_HORIZON_S,
    PAYLOADS_DIR,
    RetentionJob,
    build_pruner,
    ledger_keep_bound_s,
)
from agentrt.server.engine._run import RunHandle, signal_cancel
from agentrt.server.engine._wakes import ChannelWakes, ReleasedInbox, ReleaseSender, WakeInbox, WakeSender

__all__ = [
    "LEDGER_RECONCILE_HORIZON_S",
    "PAYLOADS_DIR",
    "RUNTIME_VERSION",
    "STATE_VERSION",
    "BoundModel",
    "ChannelWakes",
    "ChildRuns",
    "Counters",
    "Engine",
    "FaultPlan",
    "Fresh",
    "InjectedFault",
    "LiveEvents",
    "ModelPort",
    "PayloadPort",
    "PolicyPort",
    "Ports",
    "ReleaseSender",
    "ReleasedInbox",
    "ResolvedAgent",
    "RetentionJob",
    "RunHandle",
    "RunLog",
    "StartRequest",
    "ToolPort",
    "WakeInbox",
    "WakeSender",
    "bind_model",
    "build_pruner",
    "drive_contained",
    "effective_budgets",
    "ledger_keep_bound_s",
    "new_run_id",
    "sensitive_option",
    "signal_cancel",
]
