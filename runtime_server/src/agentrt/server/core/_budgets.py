"""Budgets and usage (R6.1): hard limits checked before each step, never asked of the model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from agentrt.server.core._money import upgrade_money_json


@dataclass(frozen=True, slots=True, kw_only=True)
class Budgets:
    """Effective limits of one run. ``0`` means unlimited for the optional kinds."""

    max_model_steps: int = 20
    max_tool_calls: int = 50
    max_calls_per_tool: Mapping[str, int] = field(default_factory=dict)
    timeout_s: float = 300.0
    max_input_tokens: int = 0
    max_output_tokens: int = 0
    max_cost_micros: int = 0  # micro-dollars (core/_money.py)
    max_handoffs: int = 0
    max_parallel_tool_calls: int = 1

    def overridden(self, overrides: Mapping[str, Any]) -> Budgets:
        """A copy with the non-zero ``overrides`` applied."""
        changes = {k: v for k, v in overrides.items() if v}
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """Proto3 JSON shape of ``agentrt.runtime.v1.Budgets``."""
        out: dict[str, Any] = {
            "max_model_steps": self.max_model_steps,
            "max_tool_calls": self.max_tool_calls,
            "timeout": f"{self.timeout_s:.3f}s",
            "max_parallel_tool_calls": self.max_parallel_tool_calls,
        }
        if self.max_calls_per_tool:
            out["max_calls_per_tool"] = dict(self.max_calls_per_tool)
        for name in ("max_input_tokens", "max_output_tokens", "max_cost_micros", "max_handoffs"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Budgets:
        """Inverse of :meth:`to_json`; also reads the float ``max_cost_usd`` of older runs."""
        values = dict(upgrade_money_json(data))
        for name in ("max_cost_micros", "max_input_tokens", "max_output_tokens"):
            if name in values:  # proto3 JSON writes int64 as a string
                values[name] = int(values[name])
        timeout = values.pop("timeout", None)
        if timeout is not None:
            values["timeout_s"] = float(str(timeout).rstrip("s"))
        values["max_calls_per_tool"] = dict(values.get("max_calls_per_tool", {}))
        return cls(**values)


@dataclass(slots=True)
class Usage:
    """What a run has consumed. Mutable: one worker owns a run's usage at a time."""

    model_steps: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_micros: int = 0  # micro-dollars (core/_money.py): sums are exact
    handoffs: int = 0
    calls_per_tool: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Proto3 JSON shape of ``agentrt.runtime.v1.Usage`` (per-tool counts stay internal)."""
        # Built by hand: dataclasses.asdict showed up in step-loop profiles.
        return {
            "model_steps": self.model_steps,
            "tool_calls": self.tool_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_micros": self.cost_micros,
            "handoffs": self.handoffs,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], calls_per_tool: dict[str, int] | None = None) -> Usage:
        """Inverse of :meth:`to_json`; also reads the float ``cost_usd`` of older runs."""
        if "cost_usd" in data:
            data = upgrade_money_json(data)
        get = data.get  # positional and local: every replayed step event carries one or two usages
        return cls(
            int(get("model_steps", 0)),
            int(get("tool_calls", 0)),
            int(get("input_tokens", 0)),
            int(get("output_tokens", 0)),
            int(get("cost_micros", 0)),
            int(get("handoffs", 0)),
            calls_per_tool if calls_per_tool is not None else {},
        )

    def totals(self) -> Usage:
        """A copy without the per-tool counts: what an event records (they stay internal)."""
        return Usage(
            self.model_steps,
            self.tool_calls,
            self.input_tokens,
            self.output_tokens,
            self.cost_micros,
            self.handoffs,
        )

    def copy(self) -> Usage:
        return Usage(
            self.model_steps,
            self.tool_calls,
            self.input_tokens,
            self.output_tokens,
            self.cost_micros,
            self.handoffs,
            dict(self.calls_per_tool),
        )


def exhausted_before_model_step(budgets: Budgets, usage: Usage) -> str | None:
    """Name of the budget a new model step would exceed, or None."""
    if usage.model_steps >= budgets.max_model_steps:
        return "model_steps"
    if budgets.max_input_tokens and usage.input_tokens >= budgets.max_input_tokens:
        return "input_tokens"
    if budgets.max_output_tokens and usage.output_tokens >= budgets.max_output_tokens:
        return "output_tokens"
    if budgets.max_cost_micros and usage.cost_micros >= budgets.max_cost_micros:
        return "cost"
    return None


def exhausted_before_tool_call(budgets: Budgets, usage: Usage, tool: str) -> str | None:
    """Name of the budget one more call of ``tool`` would exceed, or None."""
    if usage.tool_calls >= budgets.max_tool_calls:
        return "tool_calls"
    limit = budgets.max_calls_per_tool.get(tool)
    if limit is not None and usage.calls_per_tool.get(tool, 0) >= limit:
        return f"calls_per_tool:{tool}"
    return None
