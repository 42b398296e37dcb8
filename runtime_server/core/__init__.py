"""Pure core of agentrt: phases, transitions, events, state, budgets, deadlines.

No I/O and no clock reads here (a test enforces the imports): the engine passes
time in and performs what the decider asks for.
"""

from __future__ import annotations

from runtime_server.core import _events as events
from runtime_server.core._budgets import (
    Budgets,
    Usage,
    exhausted_before_model_step,
    exhausted_before_tool_call,
)
from runtime_server.core._deadline import backoff_delay_s, call_timeout_s, retry_fits
from runtime_server.core._decide import (
    BUDGET_PREFIX,
    NOT_ALLOWED_CODE,
    Append,
    CallModel,
    Clock,
    Decision,
    Finalize,
    Idle,
    InvokeTool,
    InvokeTools,
    PauseForBudget,
    Policy,
    Reconcile,
    RequestApproval,
    WaitUntil,
    corrective_step,
    decide,
    end_events,
    not_allowed_error,
)
from runtime_server.core._errors import (
    AgentRtError,
    FailedPrecondition,
    IllegalTransition,
    InvalidRequest,
    LeaseLost,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    ResourceExhausted,
    StaleRevision,
    Unauthenticated,
)
from runtime_server.core._events import Event
from runtime_server.core._keys import args_hash, canonical_json, idempotency_key
from runtime_server.core._loops import LoopPolicy, LoopTracker
from runtime_server.core._phases import (
    ACTIVE_PHASES,
    RULES,
    TERMINAL_PHASES,
    Phase,
    Rule,
    Trigger,
    rule_for,
    transition,
)
from runtime_server.core._state import CallState, HistoryEntry, RunState, replay
from runtime_server.core._timefmt import parse_rfc3339_ms, rfc3339
from runtime_server.core._upgrade import (
    STATE_VERSION,
    UPGRADERS,
    IncompatibleVersion,
    compatible_tool_versions,
    upgrade,
)

__all__ = [
    "ACTIVE_PHASES",
    "BUDGET_PREFIX",
    "NOT_ALLOWED_CODE",
    "RULES",
    "STATE_VERSION",
    "TERMINAL_PHASES",
    "UPGRADERS",
    "AgentRtError",
    "Append",
    "Budgets",
    "CallModel",
    "CallState",
    "Clock",
    "Decision",
    "Event",
    "FailedPrecondition",
    "Finalize",
    "HistoryEntry",
    "Idle",
    "IllegalTransition",
    "IncompatibleVersion",
    "InvalidRequest",
    "InvokeTool",
    "InvokeTools",
    "LeaseLost",
    "LoopPolicy",
    "LoopTracker",
    "NotFound",
    "PauseForBudget",
    "PayloadTooLarge",
    "PermissionDenied",
    "Phase",
    "Policy",
    "Reconcile",
    "RequestApproval",
    "ResourceExhausted",
    "Rule",
    "RunState",
    "StaleRevision",
    "Trigger",
    "Unauthenticated",
    "Usage",
    "WaitUntil",
    "args_hash",
    "backoff_delay_s",
    "call_timeout_s",
    "canonical_json",
    "compatible_tool_versions",
    "corrective_step",
    "decide",
    "end_events",
    "events",
    "exhausted_before_model_step",
    "exhausted_before_tool_call",
    "idempotency_key",
    "not_allowed_error",
    "parse_rfc3339_ms",
    "replay",
    "retry_fits",
    "rfc3339",
    "rule_for",
    "transition",
    "upgrade",
]
