"""Inline agents name server-side model profiles only, within the operator's lists (DESIGN R10.2)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.protobuf import struct_pb2

from agentrt.proto.runtime.v1 import run_pb2
from agentrt.server.api._convert import agent_from_proto
from agentrt.server.api._inline import check_inline_agent
from agentrt.server.auth import Principal, local_principal
from agentrt.server.config import (
    AgentConfig,
    InlineAgentsConfig,
    ModelConfig,
    ModelProfileConfig,
    Role,
    Settings,
)
from agentrt.server.core import AgentRtError, InvalidRequest, NotPermitted
from agentrt.server.engine import ResolvedAgent, bind_model, sensitive_option
from agentrt.server.models import ModelConfigError

SECRET_URL = "https://models.internal.example:8443/v1"
SECRET_ENV = "AGENTRT_TEST_PROFILE_KEY"
SCRIPT = {"steps": [{"text": "hello {input}"}]}


def settings(**inline: Any) -> Settings:
    return Settings(
        agents={"billing": AgentConfig(tools=["refund.issue"])},
        model_profiles={
            "scripted": ModelProfileConfig(provider="scripted", inline_options=["steps"]),
            "gpt": ModelProfileConfig(
                provider="openai",
                name="gpt-test",
                options={"base_url": SECRET_URL, "api_key_env": SECRET_ENV, "temperature": 0.1},
                inline_options=["temperature"],
            ),
        },
        inline_agents=InlineAgentsConfig(**inline),
    )


ENABLED = settings(enabled=True, tools=["noop.echo", "orders.lookup"], agents=["billing"])


def principal(*roles: Role) -> Principal:
    return Principal(subject="caller", tenant="t1", roles=frozenset(roles), authenticated_by="token")


def spec(
    *,
    profile: str = "scripted",
    options: dict[str, Any] | None = None,
    tools: tuple[str, ...] = ("noop.echo",),
    **fields: Any,
) -> run_pb2.AgentSpec:
    struct = struct_pb2.Struct()
    struct.update(SCRIPT if options is None else options)
    model = run_pb2.ModelSpec(
        profile=profile, options=struct, provider=fields.pop("provider", ""), name=fields.pop("model", "")
    )
    return run_pb2.AgentSpec(name=fields.pop("name", "mine"), model=model, tools=list(tools), **fields)


def refused(
    agent: run_pb2.AgentSpec, *, config: Settings = ENABLED, who: Principal | None = None
) -> AgentRtError:
    with pytest.raises(AgentRtError) as info:
        check_inline_agent(agent, settings=config, principal=who or local_principal("t1"))
    return info.value


def test_inline_agents_are_refused_unless_the_server_enables_them() -> None:
    error = refused(spec(), config=settings())
    assert isinstance(error, NotPermitted) and error.reason == "INLINE_AGENTS_DISABLED"


def test_the_caller_needs_one_of_the_configured_roles() -> None:
    error = refused(spec(), who=principal("runner"))  # the default list is admin only
    assert isinstance(error, NotPermitted) and error.reason == "MISSING_ROLE"
    assert error.metadata["required_roles"] == "admin"
    runners = settings(enabled=True, roles=["runner"], tools=["noop.echo"])
    check_inline_agent(spec(), settings=runners, principal=principal("runner"))
    check_inline_agent(spec(), settings=runners, principal=principal("admin"))  # admin holds every role
    assert refused(spec(), config=runners, who=principal("approver")).reason == "MISSING_ROLE"


def test_an_allowed_inline_agent_passes_and_converts_to_its_profile_and_own_options() -> None:
    agent = spec(handoffs=["billing"], agent_tools=["billing"])
    check_inline_agent(agent, settings=ENABLED, principal=principal("admin"))
    config = agent_from_proto(agent)
    assert config.model.profile == "scripted" and dict(config.model.options) == SCRIPT
    assert (
        config.tools == ["noop.echo"] and config.handoffs == ["billing"] and config.agent_tools == ["billing"]
    )


@pytest.mark.parametrize(
    ("fields", "field", "reason"),
    [
        ({"provider": "openai"}, "agent.model.provider", "FIELD_NOT_ALLOWED"),
        ({"model": "gpt-4o"}, "agent.model.name", "FIELD_NOT_ALLOWED"),
        ({"profile": ""}, "agent.model.profile", "PROFILE_REQUIRED"),
        ({"profile": "nope"}, "agent.model.profile", "UNKNOWN_PROFILE"),
        ({"name": "billing"}, "agent.name", "AGENT_NAME_TAKEN"),
    ],
)
def test_the_model_is_a_server_profile_and_nothing_else(
    fields: dict[str, Any], field: str, reason: str
) -> None:
    error = refused(spec(**fields))
    assert isinstance(error, InvalidRequest) and (error.field, error.reason) == (field, reason)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("base_url", "http://attacker.example:9999/v1"),
        ("api_key_file", "/etc/agentrt/secret-key"),
        ("api_key_env", "AWS_SECRET_ACCESS_KEY"),
        ("headers", {"X-Forward-To": "attacker.example"}),
        ("file", "/etc/passwd"),
        ("temperature", 0.5),  # a real option, but this profile does not open it to callers
    ],
)
def test_options_outside_the_profiles_inline_options_are_refused_without_echoing_values(
    key: str, value: Any
) -> None:
    error = refused(spec(options={**SCRIPT, key: value}))
    assert isinstance(error, InvalidRequest) and error.reason == "OPTION_NOT_ALLOWED"
    assert error.field == f"agent.model.options.{key}"
    assert json.dumps(value).strip('"') not in error.message + json.dumps(error.metadata)


def test_endpoint_and_key_options_are_refused_even_if_a_profile_lists_them() -> None:
    # The server refuses such a profile at start; the request check does not rely on that.
    config = Settings(
        model_profiles={
            "open": ModelProfileConfig(provider="openai", inline_options=["base_url", "temperature"])
        },
        inline_agents=InlineAgentsConfig(enabled=True),
    )
    error = refused(spec(profile="open", options={"base_url": "http://x.example"}, tools=()), config=config)
    assert error.reason == "OPTION_NOT_ALLOWED"
    check_inline_agent(
        spec(profile="open", options={"temperature": 0.2}, tools=()),
        settings=config,
        principal=principal("admin"),
    )
    assert all(
        sensitive_option(k) for k in ("base_url", "api_key_env", "api_key_file", "headers", "Base_URL")
    )
    assert not any(sensitive_option(k) for k in ("steps", "temperature", "max_tokens", "stream"))


def test_tools_and_agents_must_lie_within_the_operators_lists() -> None:
    error = refused(spec(tools=("noop.echo", "refund.issue")))
    assert isinstance(error, NotPermitted) and error.reason == "TOOL_NOT_ALLOWED"
    assert error.metadata == {"tool": "refund.issue"}
    for agent in (spec(handoffs=["root"]), spec(agent_tools=["root"])):
        error = refused(agent)
        assert isinstance(error, NotPermitted) and error.reason == "AGENT_NOT_ALLOWED"
        assert error.metadata == {"agent": "root"}


def test_a_profile_gives_provider_name_and_options_and_the_agents_own_options_go_on_top() -> None:
    model = ModelConfig(profile="gpt", options={"temperature": 0.7})
    bound = bind_model(model, ENABLED.model_profiles)
    assert (bound.spec.provider, bound.spec.name) == ("openai", "gpt-test")
    assert dict(bound.spec.options) == {"base_url": SECRET_URL, "api_key_env": SECRET_ENV, "temperature": 0.7}
    plain = bind_model(ModelConfig(provider="scripted", options=SCRIPT), {})
    assert plain.spec.options is not None and plain.profile == "" and plain.redact(SECRET_URL) == SECRET_URL
    with pytest.raises(ModelConfigError) as info:
        bind_model(ModelConfig(profile="gone"), ENABLED.model_profiles)
    assert info.value.reason == "unknown_profile"


def test_messages_name_the_profile_instead_of_its_endpoint_or_key_source() -> None:
    bound = bind_model(ModelConfig(profile="gpt"), ENABLED.model_profiles)
    text = f"cannot reach the model endpoint {SECRET_URL}: ConnectError; variable {SECRET_ENV} is not set"
    redacted = bound.redact(text)
    assert SECRET_URL not in redacted and SECRET_ENV not in redacted and "<profile gpt>" in redacted


def test_the_run_snapshot_keeps_the_profile_name_and_own_options_only() -> None:
    config = AgentConfig(model=ModelConfig(profile="gpt", options={"temperature": 0.7}), handoffs=["billing"])
    agents = {"billing": AgentConfig(model=ModelConfig(profile="gpt"))}
    resolved = ResolvedAgent.resolve("mine", config, agents)
    snapshot = resolved.snapshot_json()
    assert SECRET_URL not in snapshot and SECRET_ENV not in snapshot and "openai" not in snapshot
    data = json.loads(snapshot)
    assert data["config"]["model"] == {"profile": "gpt", "options": {"temperature": 0.7}}
    assert data["peers"]["billing"]["model"] == {"profile": "gpt", "options": {}}
    again = ResolvedAgent.from_snapshot(snapshot)
    assert again.snapshot_json() == snapshot and again.config_hash() == resolved.config_hash()
    # The profile is looked up when the model is called: a rotated endpoint reaches stored runs.
    rotated = {"gpt": ModelProfileConfig(provider="openai", options={"base_url": "https://new.example/v1"})}
    assert bind_model(again.config.model, rotated).spec.options["base_url"] == "https://new.example/v1"
