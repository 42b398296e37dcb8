"""What a caller's agent is checked for before its run is written: served tools, a usable model."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from agentrt.server.config import AgentConfig, ModelProfileConfig
from agentrt.server.core import InvalidRequest
from agentrt.server.engine._agents import bind_model
from agentrt.server.models import ModelConfigError, ModelRegistry


def check_agent(
    config: AgentConfig,
    *,
    served_tools: Iterable[str],
    models: ModelRegistry,
    profiles: Mapping[str, ModelProfileConfig],
) -> None:
    """Refuse an agent whose tools no tool host serves or whose model cannot be made (R10.4).

    Raises:
        InvalidRequest: ``UNKNOWN_TOOL``, ``UNKNOWN_PROFILE`` or ``INVALID_MODEL``.
    """
    known = set(served_tools)
    unknown = [t for t in config.tools if t not in known]
    if unknown:
        raise InvalidRequest(
            f"unknown tools {unknown}; served tools: {sorted(known)}",
            field="agent.tools",
            reason="UNKNOWN_TOOL",
        )
    try:
        bound = bind_model(config.model, profiles)
    except ModelConfigError as exc:
        raise InvalidRequest(str(exc), field="agent.model.profile", reason="UNKNOWN_PROFILE") from None
    try:
        models.provider(bound.spec)
    except ModelConfigError as exc:
        # A profile's endpoints and key sources are the server's business, not the caller's.
        message = f"agent model is invalid: {bound.redact(str(exc))}"
        raise InvalidRequest(message, field="agent.model", reason="INVALID_MODEL") from None
