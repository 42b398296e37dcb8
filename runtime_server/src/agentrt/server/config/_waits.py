"""Settings of waits on something outside a run (issue 11): ``[reconcile]`` and ``[escalation]``.

``[reconcile]``: how often a run in UNKNOWN_OUTCOME asks its tool host's ledger again (doubling
from ``base_s`` to ``cap_s``). ``[escalation]``: after how long an unknown outcome or an approval
wait needs a person (``run.escalated``, ``Run.needs_attention``), and how far apart the ledger
queries of an escalated unknown outcome may grow (``operator_wait_cap_s``). See ``core/_waits.py``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agentrt.server.core import WaitPolicy

__all__ = ["EscalationConfig", "ReconcileConfig", "wait_policy"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReconcileConfig(_Strict):
    """Backoff of the ledger queries of an unknown outcome; the count survives the run's parking."""

    base_s: float = Field(1.0, gt=0)
    cap_s: float = Field(60.0, gt=0)


class EscalationConfig(_Strict):
    """When a wait needs a person (0: never by age; past the deadline still escalates)."""

    unknown_outcome_after_s: float = Field(3600.0, ge=0)
    approval_after_s: float = Field(14400.0, ge=0)
    operator_wait_cap_s: float = Field(86400.0, gt=0)  # the query backoff's cap once escalated


def wait_policy(reconcile: ReconcileConfig, escalation: EscalationConfig) -> WaitPolicy:
    return WaitPolicy(
        reconcile_base_ms=_ms(reconcile.base_s),
        reconcile_cap_ms=_ms(reconcile.cap_s),
        operator_wait_cap_ms=_ms(escalation.operator_wait_cap_s),
        unknown_outcome_after_ms=_ms(escalation.unknown_outcome_after_s),
        approval_after_ms=_ms(escalation.approval_after_s),
    )


def _ms(seconds: float) -> int:
    return round(seconds * 1000)
