"""Money in integer micro-dollars (core/_money.py): exact sums, exact conversions, old floats upgraded."""

from __future__ import annotations

import math
import random

import pytest

from agentrt.proto.runtime.v1 import run_pb2
from agentrt.server.api._convert import agent_from_proto
from agentrt.server.api._validate import MAX_COST_MICROS
from agentrt.server.config import BudgetsConfig, PriceConfig
from agentrt.server.core import (
    Budgets,
    RawEvent,
    Usage,
    budget_grant,
    exhausted_before_model_step,
    format_usd,
    price_micros,
    replay,
    upgrade,
    upgrade_money_json,
    usage_plus,
    usd_to_micros,
)
from agentrt.server.core import events as ev
from agentrt.server.engine._approval_step import _amount
from agentrt.server.store import decode_event


def test_dollars_convert_through_their_decimal_text_not_binary_floats() -> None:
    # Float dollars summed 0.1 + 0.2 to 0.30000000000000004; micro-dollars sum exactly.
    assert usd_to_micros(0.1) + usd_to_micros(0.2) == usd_to_micros(0.3) == 300_000
    assert usd_to_micros(0.1 + 0.2) == 300_000  # a float an old runtime summed reads back exactly
    assert usd_to_micros(1.005) == 1_005_000  # binary 1.00499999999999989... would round down
    assert usd_to_micros(0.29) == 290_000  # int(0.29 * 1e6) is 289999
    assert usd_to_micros("12.3456785") == 12_345_678  # half-even below a micro-dollar
    assert usd_to_micros(1e9) == MAX_COST_MICROS


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "1e", "abc"])
def test_a_value_that_is_not_a_finite_number_is_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        usd_to_micros(bad)  # type: ignore[arg-type]


def test_a_run_of_many_small_costs_sums_exactly() -> None:
    usage = Usage()
    price = PriceConfig(input_per_mtok=0.1, output_per_mtok=0.2)
    for _ in range(10_000):  # each call: 1 token in, 1 out = 0.3 micro-dollars, rounded up to 1
        spent = Usage(model_steps=1, cost_micros=price.cost_micros(1, 1))
        usage = usage_plus(usage, spent)
    assert usage.cost_micros == 10_000 and isinstance(usage.cost_micros, int)
    # Whole micro-dollars add without rounding: 0.1 + 0.2 dollars is 300000 micros, not 300000.00000000006.
    assert price.cost_micros(1_000_000, 1_000_000) == 300_000


def test_prices_round_each_call_up_so_a_budget_never_under_counts() -> None:
    assert price_micros(3, 0, 0.15, 0.6) == 1  # 0.45 micro-dollars
    assert price_micros(10, 10, 0.15, 0.6) == 8  # 1.5 + 6 = 7.5
    assert price_micros(1_000_000, 0, 0.15, 0.6) == 150_000  # exact when whole
    assert price_micros(0, 0, 2.5, 10.0) == 0
    assert PriceConfig(input_per_mtok=50000.0, output_per_mtok=50000.0).cost_micros(10000, 6) == 500_300_000


def test_the_cost_budget_compares_integers_at_the_boundary() -> None:
    budgets = Budgets(max_cost_micros=300_000)
    assert exhausted_before_model_step(budgets, Usage(cost_micros=299_999)) is None
    assert exhausted_before_model_step(budgets, Usage(cost_micros=usd_to_micros(0.1 + 0.2))) == "cost"
    assert exhausted_before_model_step(Budgets(max_cost_micros=0), Usage(cost_micros=10**15)) is None


def test_config_dollars_become_exact_micros_and_inline_micros_round_trip() -> None:
    assert BudgetsConfig(max_cost_usd=0.29).to_budgets().max_cost_micros == 290_000
    assert BudgetsConfig(max_cost_usd=1e-6).to_budgets().max_cost_micros == 1
    rng = random.Random(10)
    samples = [0, 1, 7, 999_999, 1_000_001, MAX_COST_MICROS - 1, MAX_COST_MICROS]
    samples += [rng.randrange(MAX_COST_MICROS) for _ in range(2000)]
    for micros in samples:
        spec = run_pb2.AgentSpec(budgets=run_pb2.Budgets(max_cost_micros=micros))
        assert agent_from_proto(spec).budgets.to_budgets().max_cost_micros == micros


def test_format_usd_shows_every_micro_dollar() -> None:
    assert format_usd(0) == "0.000000"
    assert format_usd(12_300) == "0.012300"
    assert format_usd(1_234_567_891) == "1234.567891"
    assert format_usd(-5) == "-0.000005"


def test_upgrade_money_json_converts_old_floats_at_any_depth_and_leaves_current_data_alone() -> None:
    current = {
        "usage_before": {"cost_micros": 5},
        "tool_calls": [{"call_id": "c"}],
        "budgets": {"max_cost_micros": 9},
    }
    assert upgrade_money_json(current) is current
    old = {
        "usage_after": {"model_steps": 3, "cost_usd": 0.1 + 0.2},
        "budgets": {"max_cost_usd": 0.5},
        "list": [{"cost_usd": 1e-6}],
        "bad": {"cost_usd": "NaN"},
        "both": {"cost_usd": 9.0, "cost_micros": 1},  # the current key wins
    }
    new = upgrade_money_json(old)
    assert new == {
        "usage_after": {"model_steps": 3, "cost_micros": 300_000},
        "budgets": {"max_cost_micros": 500_000},
        "list": [{"cost_micros": 1}],
        "bad": {"cost_micros": 0},  # a stored record must still load
        "both": {"cost_micros": 1},
    }
    assert upgrade_money_json(new) == new
    assert old["usage_after"] == {"model_steps": 3, "cost_usd": 0.1 + 0.2}  # the input is not mutated


def test_usage_and_budgets_read_old_rows_and_proto_json_int64_strings() -> None:
    assert Usage.from_json({"model_steps": 2, "cost_usd": 0.30000000000000004}).cost_micros == 300_000
    assert Usage.from_json({"cost_micros": "300000"}).cost_micros == 300_000
    assert Budgets.from_json({"max_cost_usd": 0.5, "timeout": "3.000s"}).max_cost_micros == 500_000
    assert Budgets.from_json({"max_cost_micros": "7"}).max_cost_micros == 7
    budgets = Budgets(max_cost_micros=123_456)
    assert Budgets.from_json(budgets.to_json()) == budgets


def test_an_old_log_with_float_dollars_upgrades_and_replays_to_exact_micros() -> None:
    usage = [{"model_steps": n, "cost_usd": sum([0.1] * n, 0.0)} for n in range(4)]
    old: list[RawEvent] = [
        (ev.RUN_STARTED, {"agent_name": "a", "input": "hi", "budgets": {"max_cost_usd": 0.5}}),
        (ev.STEP_STARTED, {"step": 1, "kind": "model", "usage": usage[0]}),
        (ev.MODEL_COMPLETED, {"step": 1, "text": "", "usage_before": usage[0], "usage_after": usage[1]}),
        (ev.STEP_STARTED, {"step": 2, "kind": "model", "usage": usage[1]}),
        (ev.MODEL_COMPLETED, {"step": 2, "text": "", "usage_before": usage[1], "usage_after": usage[3]}),
    ]
    upgraded = upgrade(old, from_version=2)
    assert "cost_usd" not in str(upgraded)
    assert upgraded[4][1]["usage_after"] == {"model_steps": 3, "cost_micros": 300_000}
    assert upgraded[0][1]["budgets"] == {"max_cost_micros": 500_000}
    assert upgrade(upgraded, from_version=2) == upgraded  # current events are left alone
    assert upgraded[1][1] is not old[1][1] and upgraded[1][1]["kind"] == "model"  # the core's words stay
    state = replay("r", [decode_event(t, data) for t, data in upgraded])
    assert state.usage.cost_micros == 300_000 and state.usage.model_steps == 3
    # Usage reads old floats even without the upgrader.
    assert replay("r", [decode_event(t, data) for t, data in old]).usage.cost_micros == 300_000


def test_a_cost_budget_grant_doubles_exact_micros_and_shows_dollars_to_the_approver() -> None:
    limit, grant, after = budget_grant(Budgets(max_cost_micros=300_000), "cost")
    assert (limit, grant, after.max_cost_micros) == (300_000, 600_000, 600_000)
    assert isinstance(after.max_cost_micros, int)
    assert _amount("cost", grant) == "US$0.600000" and _amount("tool_calls", 4) == "4"
