"""What an inline agent (an AgentSpec sent with RunAgent/StartRun) may name (DESIGN R10.2).

An inline agent is a caller's code running with the server's credentials, so it gets only what
the operator opened up in ``[inline_agents]``: it is refused unless enabled and unless the caller
holds one of the configured roles; its model is a named server-side profile (endpoints, key
sources and headers stay in server config) with only the option keys the profile lists as
``inline_options``; its tools, handoffs and agents-as-tools lie within the operator's lists.

Every check runs on the request alone, before anything is converted, written, or connected to,
and no message repeats a value the caller sent in the model options.
"""

from __future__ import annotations

from agentrt.proto.runtime.v1 import run_pb2
from agentrt.server.auth import Principal
from agentrt.server.config import Settings
from agentrt.server.core import InvalidRequest, NotPermitted
from agentrt.server.engine import sensitive_option

__all__ = ["INLINE_AGENT_NAME", "check_inline_agent"]

INLINE_AGENT_NAME = "inline"
"""Name of an inline agent sent without one."""

_MAX_SHOWN = 100  # longest caller-chosen name quoted back in an error


def _shown(text: str) -> str:
    return text[:_MAX_SHOWN]


def check_inline_agent(spec: run_pb2.AgentSpec, *, settings: Settings, principal: Principal) -> None:
    """Refuse an inline agent that the server's config does not allow.

    Raises:
        NotPermitted: ``INLINE_AGENTS_DISABLED``; ``MISSING_ROLE`` (the caller holds none of
            ``inline_agents.roles``); ``TOOL_NOT_ALLOWED`` (metadata ``tool``) or
            ``AGENT_NOT_ALLOWED`` (metadata ``agent``) for a tool, handoff or agent tool outside
            the operator's lists.
        InvalidRequest: ``AGENT_NAME_TAKEN`` (the name of a configured agent), ``PROFILE_REQUIRED``,
            ``UNKNOWN_PROFILE``, ``FIELD_NOT_ALLOWED`` (``agent.model.provider`` or
            ``agent.model.name`` set), ``OPTION_NOT_ALLOWED`` (field ``agent.model.options.<key>``).
    """
    config = settings.inline_agents
    if not config.enabled:
        raise NotPermitted(
            "inline agents are disabled on this server; name a configured agent",
            reason="INLINE_AGENTS_DISABLED",
        )
    if not principal.has_role(*config.roles):
        raise NotPermitted(
            f"sending an inline agent needs one of the roles {sorted(config.roles)}",
            reason="MISSING_ROLE",
            metadata={"required_roles": ",".join(sorted(config.roles))},
        )
    name = spec.name or INLINE_AGENT_NAME
    if name in settings.agents:
        # Approver scopes and listings go by agent name: an inline agent cannot pose as a configured one.
        raise InvalidRequest(
            f"an agent named {_shown(name)!r} is configured on the server; name the inline agent otherwise",
            field="agent.name",
            reason="AGENT_NAME_TAKEN",
        )
    model = spec.model
    for field_name in ("provider", "name"):
        if getattr(model, field_name):
            raise InvalidRequest(
                f"an inline agent's model {field_name} comes from its profile; leave "
                f"agent.model.{field_name} empty and set agent.model.profile",
                field=f"agent.model.{field_name}",
                reason="FIELD_NOT_ALLOWED",
            )
    if not model.profile:
        raise InvalidRequest(
            "an inline agent must name a model profile configured on the server (agent.model.profile)",
            field="agent.model.profile",
            reason="PROFILE_REQUIRED",
        )
    profile = settings.model_profiles.get(model.profile)
    if profile is None:
        raise InvalidRequest(
            f"no model profile named {_shown(model.profile)!r} is configured",
            field="agent.model.profile",
            reason="UNKNOWN_PROFILE",
        )
    allowed_options = {k for k in profile.inline_options if not sensitive_option(k)}
    for key in sorted(model.options.fields):
        # Endpoints, key sources and headers never come from a caller, whatever the profile lists.
        if key not in allowed_options:
            raise InvalidRequest(
                f"option {_shown(key)!r} may not be set by an inline agent of profile "
                f"{model.profile!r}; allowed: {sorted(allowed_options)}",
                field=f"agent.model.options.{_shown(key)}",
                reason="OPTION_NOT_ALLOWED",
            )
    for tool in spec.tools:
        if tool not in config.tools:
            raise NotPermitted(
                f"tool {_shown(tool)!r} is not among the tools an inline agent may be given",
                reason="TOOL_NOT_ALLOWED",
                metadata={"tool": _shown(tool)},
            )
    for agent in (*spec.handoffs, *spec.agent_tools):
        if agent not in config.agents:
            raise NotPermitted(
                f"agent {_shown(agent)!r} is not among the agents an inline agent may reach",
                reason="AGENT_NOT_ALLOWED",
                metadata={"agent": _shown(agent)},
            )
