"""Retention age math (pure; now is passed in)."""

from __future__ import annotations

import math

import pytest

from agentrt.server import ConfigError, load_settings
from agentrt.server.core import Phase, RetentionPolicy

NOW = 10_000_000


def test_a_tenants_entry_overrides_the_default_and_none_keeps_forever() -> None:
    policy = RetentionPolicy(ended_after_s=60, per_tenant={"a": 1.5})
    assert policy.age_s("a") == 1.5 and policy.age_s("b") == 60
    assert policy.cutoff_ms("a", now_ms=NOW) == NOW - 1500
    assert policy.default_cutoff_ms(now_ms=NOW) == NOW - 60_000
    only = RetentionPolicy(per_tenant={"a": 1})
    assert only.configured and only.cutoff_ms("b", now_ms=NOW) is None
    assert not RetentionPolicy().configured and RetentionPolicy().cutoff_ms("a", now_ms=NOW) is None


def test_fractional_ages_round_towards_keeping() -> None:
    # 1.0001 s is 1000.1 ms: a run 1000 ms old is not yet due.
    policy = RetentionPolicy(ended_after_s=1.0001)
    assert policy.cutoff_ms("t", now_ms=NOW) == NOW - 1001


@pytest.mark.parametrize("phase", list(Phase))
def test_only_ended_unpruned_runs_at_or_past_the_cutoff_are_prunable(phase: Phase) -> None:
    policy = RetentionPolicy(ended_after_s=1)

    def prunable(updated_ms: int, pruned_ms: int | None = None) -> bool:
        return policy.prunable(
            tenant_id="t", phase=phase.value, updated_ms=updated_ms, pruned_ms=pruned_ms, now_ms=NOW
        )

    assert prunable(NOW - 1000) is phase.terminal
    assert prunable(NOW - 999) is False
    assert prunable(NOW - 5000, pruned_ms=NOW - 1) is False


@pytest.mark.parametrize("age", [0.0, -1.0, math.nan, math.inf])
def test_ages_must_be_finite_and_positive(age: float) -> None:
    with pytest.raises(ValueError, match="finite and > 0"):
        RetentionPolicy(ended_after_s=age)
    with pytest.raises(ValueError, match="finite and > 0"):
        RetentionPolicy(per_tenant={"t": age})


@pytest.mark.parametrize(
    "section, key",
    [
        ({"ended_after_s": math.inf}, "retention.ended_after_s"),
        ({"ended_after_s": 0}, "retention.ended_after_s"),
        ({"per_tenant": {"a": math.inf}}, "retention.per_tenant"),
        ({"per_tenant": {"a": math.nan}}, "retention.per_tenant"),
        ({"interval_s": math.inf}, "retention.interval_s"),
        ({"batch_size": 0}, "retention.batch_size"),
    ],
)
def test_config_refuses_ages_the_policy_could_not_use(section: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_settings(env={}, base={"retention": section})
