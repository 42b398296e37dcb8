"""Real processes over loopback: a tool host and a runtime server, configured by a TOML file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentrt.testing import RuntimeProcess, ToolHostProcess, spawn_runtime, spawn_tool_host

REFUND_STEPS = [
    {
        "text": "Looking up the order.",
        "tool_calls": [{"tool": "orders.lookup", "arguments": {"order_id": "A100"}}],
    },
    {
        "text": "Refunding.",
        "tool_calls": [
            {"tool": "refund.issue", "arguments": {"order_id": "A100", "amount": 12.5, "reason": "broken"}}
        ],
    },
    {"text": "Refunded 12.50 for A100."},
]


def toml_value(value: Any) -> str:
    # JSON scalars, arrays and inline tables of strings/numbers are valid TOML when keys are bare-safe.
    if isinstance(value, dict):
        return "{" + ", ".join(f'"{k}" = {toml_value(v)}' for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value)


def agent_toml(name: str, *, steps: list[dict[str, Any]], tools: list[str], budgets: dict[str, Any]) -> str:
    return (
        f'[agents."{name}"]\ninstructions = "test agent"\ntools = {toml_value(tools)}\n'
        f'model = {{ provider = "scripted", options = {{ steps = {toml_value(steps)} }} }}\n'
        f"budgets = {toml_value(budgets)}\n"
    )


def write_config(path: Path, *, db_url: str, tool_host_address: str) -> Path:
    text = (
        f'db_url = "{db_url}"\nlease_ttl_s = 3.0\npoll_interval_s = 0.2\ngrace_s = 1.0\n'
        f'[[tool_hosts]]\nname = "local"\naddress = "{tool_host_address}"\n'
        f"[limits]\nmax_input_bytes = 2048\n"
    )
    text += agent_toml(
        "refund",
        steps=REFUND_STEPS,
        tools=["orders.lookup", "refund.issue"],
        budgets={"max_model_steps": 6, "timeout_s": 30},
    )
    nap = {"text": "sleeping", "tool_calls": [{"tool": "sleep.wait", "arguments": {"seconds": 30}}]}
    text += agent_toml(
        "sleeper", steps=[nap, nap, {"text": "woke"}], tools=["sleep.wait"], budgets={"timeout_s": 60}
    )
    text += agent_toml(
        "bad-args",
        steps=[
            {
                "text": "oops",
                "tool_calls": [
                    {"tool": "refund.issue", "arguments": {"order_id": "A100", "amount": -5, "reason": "x"}}
                ],
            },
            {"text": "could not refund"},
        ],
        tools=["refund.issue"],
        budgets={},
    )
    path.write_text(text)
    return path


@pytest.fixture
def tool_host(tmp_path: Path) -> Iterator[ToolHostProcess]:
    with spawn_tool_host(tmp_path / "toolhost", plugins=["agentrt.plugins.demo_tools"]) as host:
        yield host


@pytest.fixture
def runtime(tmp_path: Path, tool_host: ToolHostProcess, sqlite_url: str) -> Iterator[RuntimeProcess]:
    config = write_config(tmp_path / "agentrt.toml", db_url=sqlite_url, tool_host_address=tool_host.address)
    with spawn_runtime(["--config", str(config), "--listen", "127.0.0.1:0"], cwd=tmp_path) as process:
        yield process
