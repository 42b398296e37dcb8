"""What a run's steps are given, frozen: the run's identity and only the settings they use.

temporal hands each workflow instance one frozen ``WorkflowInstanceDetails`` instead of letting it
reach into the worker; the step executors here get :class:`RunDetails` the same way, so a step
never reads the runtime's whole configuration (listen addresses, auth, store URLs) through a
parent object.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from agentrt.server.config import (
    CleanupConfig,
    ModelProfileConfig,
    PayloadsConfig,
    PriceConfig,
    Settings,
    TimeoutsConfig,
    wait_policy,
)
from agentrt.server.core import WaitPolicy

__all__ = ["RunDetails", "StepSettings"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StepSettings:
    """The settings the step executors read; built once per process from :class:`Settings`."""

    tool_timeout_s: float
    model_timeout_s: float
    query_timeout_s: float
    call_reserve_s: float
    tool_attempts: int
    model_attempts: int
    retry_base_s: float
    retry_cap_s: float
    timeouts: TimeoutsConfig
    payloads: PayloadsConfig
    cleanup: CleanupConfig
    checkpoint_every_events: int
    waits: WaitPolicy
    prices: Mapping[str, PriceConfig]
    model_profiles: Mapping[str, ModelProfileConfig]

    @classmethod
    def of(cls, settings: Settings) -> StepSettings:
        return cls(
            tool_timeout_s=settings.tool_timeout_s,
            model_timeout_s=settings.model_timeout_s,
            query_timeout_s=settings.query_timeout_s,
            call_reserve_s=settings.call_reserve_s,
            tool_attempts=settings.tool_attempts,
            model_attempts=settings.model_attempts,
            retry_base_s=settings.retry_base_s,
            retry_cap_s=settings.retry_cap_s,
            timeouts=settings.timeouts,
            payloads=settings.payloads,
            cleanup=settings.cleanup,
            checkpoint_every_events=settings.checkpoints.every_events,
            waits=wait_policy(settings.reconcile, settings.escalation),
            prices=MappingProxyType(dict(settings.prices)),
            model_profiles=MappingProxyType(dict(settings.model_profiles)),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RunDetails:
    """One run's identity for this ownership period, and the settings its steps use."""

    run_id: str
    tenant_id: str
    agent_config_hash: str  # of the run's agent snapshot: checkpoints carry it
    settings: StepSettings
