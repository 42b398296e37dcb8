"""Resolving what a run executes: the agent snapshot and its effective budgets."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime_server._config import AgentConfig, LimitsConfig
from runtime_server.core import Budgets, InvalidRequest, canonical_json

RUNTIME_VERSION = "0.1.0"


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedAgent:
    """An agent as a run snapshots it: its configuration and those of the agents it can reach.

    Peers (handoff targets and agents used as tools, transitively) are snapshotted with the
    run, so a handoff days later uses the configuration the run started with.
    """

    name: str
    config: AgentConfig
    peers: Mapping[str, AgentConfig] = field(default_factory=dict)

    @classmethod
    def resolve(cls, name: str, config: AgentConfig, agents: Mapping[str, AgentConfig]) -> ResolvedAgent:
        """Snapshot ``config`` with every configured agent it can reach."""
        peers: dict[str, AgentConfig] = {name: config}  # a handoff may come back to the first agent
        todo = list(config.handoffs) + list(config.agent_tools)
        while todo:
            peer = todo.pop()
            if peer in peers or peer not in agents:
                continue
            peers[peer] = agents[peer]
            todo += list(agents[peer].handoffs) + list(agents[peer].agent_tools)
        return cls(name=name, config=config, peers=peers)

    def switch(self, name: str) -> ResolvedAgent:
        """The same snapshot with ``name`` in control (a handoff, or a child run's agent)."""
        return ResolvedAgent(name=name, config=self.peers[name], peers=self.peers)

    def snapshot_json(self) -> str:
        return canonical_json(
            {
                "name": self.name,
                "config": self.config.model_dump(mode="json", by_alias=True),
                "peers": {n: c.model_dump(mode="json", by_alias=True) for n, c in sorted(self.peers.items())},
            }
        )

    def config_hash(self) -> str:
        return hashlib.sha256(self.snapshot_json().encode()).hexdigest()

    @classmethod
    def from_snapshot(cls, text: str) -> ResolvedAgent:
        data = json.loads(text)
        peers = {n: AgentConfig.model_validate(c) for n, c in data.get("peers", {}).items()}
        return cls(name=data["name"], config=AgentConfig.model_validate(data["config"]), peers=peers)


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
