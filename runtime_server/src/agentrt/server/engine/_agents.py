"""Resolving what a run executes: the agent snapshot, its model (through a profile) and its budgets.

A model profile (``[model_profiles.<name>]``) holds a provider, a model name and options that may
name endpoints, key sources and headers. A run's snapshot keeps only the profile's name and the
agent's own options; the profile is looked up when the run's owner calls the model, so a
profile's keys and endpoints can change without touching stored runs, and none of its values
enters the database or an event (R5.7).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentrt.server.config import AgentConfig, LimitsConfig, ModelConfig, ModelProfileConfig
from agentrt.server.core import Budgets, InvalidRequest, canonical_json
from agentrt.server.models import ModelConfigError, ModelSpecData

RUNTIME_VERSION = "0.1.0"

# Option keys that can point a provider at a place (a URL, a server file, an environment
# variable) or carry a credential: they stay in server config (a profile may set them, an inline
# agent never) and their values are kept out of events and error messages.
_SENSITIVE_KEYS = frozenset(
    {
        "base_url",
        "url",
        "endpoint",
        "headers",
        "organization",
        "project",
        "file",
        "path",
        "key",
        "token",
        "secret",
        "password",
        "authorization",
    }
)
_SENSITIVE_SUFFIXES = (
    "_url",
    "_env",
    "_file",
    "_path",
    "_key",
    "_token",
    "_secret",
    "_headers",
    "_endpoint",
)


def sensitive_option(key: str) -> bool:
    """True for an option key that names an endpoint, a key source or headers (never from a caller)."""
    key = key.lower()
    return key in _SENSITIVE_KEYS or key.endswith(_SENSITIVE_SUFFIXES)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


@dataclass(frozen=True, slots=True, kw_only=True)
class BoundModel:
    """An agent's model as it is called: provider, model name and the options that reach the provider.

    Attributes:
        spec: What the model registry is asked for.
        profile: The profile the spec came from ("" for a model configured in the agent itself).
        hidden: Values of the profile's sensitive options (endpoints, key sources, headers),
            longest first; :meth:`redact` keeps them out of messages that enter events.
    """

    spec: ModelSpecData
    profile: str = ""
    hidden: tuple[str, ...] = ()
    context_tokens: int = 0  # the model's context limit; 0: none enforced

    def redact(self, text: str) -> str:
        """``text`` with every value of the profile's sensitive options replaced by the profile's name."""
        for value in self.hidden:
            text = text.replace(value, f"<profile {self.profile}>")
        return text


def bind_model(model: ModelConfig, profiles: Mapping[str, ModelProfileConfig]) -> BoundModel:
    """The provider spec of ``model``: its profile's provider, name and options, its own options on top.

    Build it once per agent config and reuse it: the model registry recognises options by
    identity, and a fresh merged dict per step would make it serialise them every time.

    Raises:
        ModelConfigError: ``unknown_profile`` when the profile is not configured (any more).
    """
    if not model.profile:
        return BoundModel(
            spec=ModelSpecData(provider=model.provider, name=model.name, options=model.options),
            context_tokens=model.context_tokens,
        )
    profile = profiles.get(model.profile)
    if profile is None:
        raise ModelConfigError(
            f"no model profile named {model.profile!r} is configured", reason="unknown_profile"
        )
    hidden = {
        text
        for key, value in profile.options.items()
        if sensitive_option(key)
        for found in _strings(value)
        for text in (found, found.rstrip("/"))
        if len(text) >= 3
    }
    return BoundModel(
        spec=ModelSpecData(
            provider=profile.provider, name=profile.name, options={**profile.options, **model.options}
        ),
        profile=model.profile,
        hidden=tuple(sorted(hidden, key=lambda t: (-len(t), t))),
        context_tokens=model.context_tokens or profile.context_tokens,
    )


def _config_json(config: AgentConfig) -> dict[str, Any]:
    data = config.model_dump(mode="json", by_alias=True)
    if config.model.profile:
        # Only the profile's name and the agent's own options: never what the profile holds.
        data["model"] = {"profile": config.model.profile, "options": data["model"]["options"]}
        if config.model.context_tokens:
            data["model"]["context_tokens"] = config.model.context_tokens
    return data


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
                "config": _config_json(self.config),
                "peers": {n: _config_json(c) for n, c in sorted(self.peers.items())},
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
