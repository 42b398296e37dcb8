"""The security configuration refuses what cannot work, naming the key (exit 2 at start)."""

from __future__ import annotations

import pytest

from agentrt.server.api._servicer import signal_rules
from agentrt.server.auth import Principal
from agentrt.server.config import ConfigError, load_settings
from agentrt.server.core import ApproverScope, SignalRules
from agentrt.toolhost.security import DEFAULT_MAX_GRANT_LIFETIME_S

BAD = {
    "mtls without a client CA": {
        "tls": {"cert_file": "c.pem", "key_file": "k.pem"},
        "auth": {"mtls": {"CN=x": {"tenant": "t", "roles": ["runner"]}}},
    },
    "cert without key": {"tls": {"cert_file": "c.pem"}},
    "client CA without TLS": {"tls": {"client_ca_file": "ca.pem"}},
    "jwt with a shared secret algorithm": {
        "auth": {"jwt": {"public_keys": ["x"], "issuer": "i", "audience": "a", "algorithms": ["HS256"]}}
    },
    "jwt without keys": {"auth": {"jwt": {"issuer": "i", "audience": "a"}}},
    "jwt without issuer": {"auth": {"jwt": {"public_keys": ["x"], "audience": "a"}}},
    "unknown role": {"auth": {"mtls": {"CN=x": {"tenant": "t", "roles": ["root"]}}}},
    "unknown model profile": {"agents": {"a": {"model": {"profile": "nope"}}}},
    "inline agents naming an unknown agent": {"inline_agents": {"enabled": True, "agents": ["ghost"]}},
    "host cert without CA": {
        "tool_hosts": [{"name": "h", "address": "h:1", "cert_file": "c", "key_file": "k"}]
    },
    "spawned host with TLS files": {"tool_hosts": [{"name": "h", "spawn": True, "ca_file": "ca"}]},
    "grant ttl out of range": {"grants": {"ttl_s": 0}},
    "grant ttl past what tool hosts accept": {"grants": {"ttl_s": DEFAULT_MAX_GRANT_LIFETIME_S + 1}},
    "removed approvers list": {"approvers": ["alice"]},
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_unusable_security_settings_are_refused(case: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env={}, base=BAD[case])
    assert "invalid configuration" in str(info.value)


def test_a_complete_secure_configuration_loads() -> None:
    settings = load_settings(
        env={},
        base={
            "listen": "0.0.0.0:50051",
            "tls": {"cert_file": "c.pem", "key_file": "k.pem", "client_ca_file": "ca.pem"},
            "auth": {
                "tokens_file": "tokens.toml",
                "mtls": {"URI:spiffe://x/billing": {"tenant": "acme", "roles": ["runner"]}},
                "approver_scopes": {"bob": {"agents": ["refunds"]}},
            },
            "grants": {"signing_key_file": "grant.key", "ttl_s": 30},
            "encryption": {"key_file": "keys.json"},
            "model_profiles": {"gpt": {"provider": "openai", "name": "gpt-4o-mini"}},
            "agents": {"refunds": {"model": {"profile": "gpt"}}},
            "inline_agents": {"enabled": True, "roles": ["runner"], "agents": ["refunds"]},
            "tool_hosts": [
                {"name": "h", "address": "h:1", "ca_file": "ca", "cert_file": "c", "key_file": "k"}
            ],
        },
    )
    assert settings.auth.configured and settings.tls.enabled and settings.tool_hosts[0].tls


def test_the_longest_grant_ttl_is_what_tool_hosts_accept_by_default() -> None:
    # A grant is checked as a call arrives: no tool timeout needs a longer one.
    settings = load_settings(env={}, base={"grants": {"ttl_s": DEFAULT_MAX_GRANT_LIFETIME_S}})
    assert settings.grants.ttl_s == DEFAULT_MAX_GRANT_LIFETIME_S


def test_the_decision_policies_are_off_by_default_and_reach_the_signal_rules() -> None:
    def who(*roles: str, subject: str = "alice") -> Principal:
        return Principal(subject=subject, tenant="t", roles=frozenset(roles), authenticated_by="token")  # type: ignore[arg-type]

    default = load_settings(env={}, base={}).auth
    assert (default.own_runs_only, default.four_eyes) == (False, False)
    assert signal_rules(default, who("runner")) == SignalRules()
    strict = load_settings(
        env={},
        base={
            "auth": {"own_runs_only": True, "four_eyes": True, "approver_scopes": {"bob": {"tools": ["t"]}}}
        },
    ).auth
    assert signal_rules(strict, who("runner")) == SignalRules(own_runs_only=True, four_eyes=True)
    for role in ("operator", "admin"):  # they operate every run of their tenant
        assert signal_rules(strict, who(role)).manages_runs
    assert signal_rules(strict, who("approver", subject="bob")).approver_scope == ApproverScope(
        tools=frozenset({"t"})
    )
    with pytest.raises(ConfigError):
        load_settings(env={}, base={"auth": {"four_eyes": "sometimes"}})
