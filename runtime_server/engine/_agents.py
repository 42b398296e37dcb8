"""Resolving what a run executes: the agent snapshot and its effective budgets."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runtime_server._config import AgentConfig, LimitsConfig
from runtime_server.core import Budgets, InvalidRequest, canonical_json

RUNTIME_VERSION = "0.1.0"


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedAgent:
    """An agent as a run snapshots it: its name and its whole configuration."""

    name: str
    config: AgentConfig

    def snapshot_json(self) -> str:
        return canonical_json(
            {"name": self.name, "config": self.config.model_dump(mode="json", by_alias=True)}
        )

    def config_hash(self) -> str:
        return hashlib.sha256(self.snapshot_json().encode()).hexdigest()

    @classmethod
    def from_snapshot(cls, text: str) -> ResolvedAgent:
        data = json.loads(text)
        return cls(name=data["name"], config=AgentConfig.model_validate(data["config"]))


def effective_budgets(agent: AgentConfig, overrides: Mapping[str, Any], limits: LimitsConfig) -> Budgets:
    """The agent's budgets with a request's non-zero overrides, refused past the server's ceilings.

    Raises:
        InvalidRequest: an override is negative or over the server's ceiling.
    """
    for name, value in overrides.items():
        if isinstance(value, int | float) and value < 0:
            raise InvalidRequest(f"budget {name} must not be negative", field=f"budgets.{name}")
    budgets = agent.budgets.to_budgets().overridden(overrides)
    ceilings = {
        "max_model_steps": limits.max_model_steps,
        "max_tool_calls": limits.max_tool_calls,
        "timeout_s": limits.max_timeout_s,
    }
    for name, ceiling in ceilings.items():
        if getattr(budgets, name) > ceiling:
            raise InvalidRequest(
                f"budget {name}={getattr(budgets, name)} is over the server's limit {ceiling}",
                field=f"budgets.{name}",
                reason="BUDGET_OVER_LIMIT",
            )
    return budgets
