"""The embedded demo configuration: SQLite, a spawned local tool host, a scripted refund agent."""

from __future__ import annotations

import importlib.util
from typing import Any

DEMO_AGENT = "refund-demo"
#: The demo's tools and policy ship in the opt-in distribution agentrt-demo.
DEMO_PLUGINS = "agentrt.plugins.demo_tools"
DEMO_MISSING = "--demo needs the demo plugins: pip install agentrt-demo (the plugins/ folder)"


def demo_plugins_installed() -> bool:
    """True when the opt-in demo plugins (distribution ``agentrt-demo``) can be imported."""
    try:
        return importlib.util.find_spec(DEMO_PLUGINS) is not None
    except ModuleNotFoundError:  # agentrt.plugins itself is missing
        return False


DEMO_SETTINGS: dict[str, Any] = {
    "db_url": "sqlite:///.agentrt/demo.sqlite",
    "data_dir": ".agentrt",
    "tool_hosts": [{"name": "local", "spawn": True}],
    "agents": {
        DEMO_AGENT: {
            "instructions": "You handle refund requests: look the order up, then refund it if it qualifies.",
            "model": {
                "provider": "scripted",
                "options": {
                    "steps": [
                        {
                            "text": "Looking up the order.",
                            "tool_calls": [{"tool": "orders.lookup", "arguments": {"order_id": "A100"}}],
                        },
                        {
                            "text": "The order qualifies; issuing the refund.",
                            "tool_calls": [
                                {
                                    "tool": "refund.issue",
                                    "arguments": {
                                        "order_id": "A100",
                                        "amount": 49.9,
                                        "reason": "arrived broken",
                                    },
                                }
                            ],
                        },
                        {
                            "text": "Refunded 49.90 for order A100. The refund is recorded once, "
                            "whatever happens."
                        },
                    ],
                },
            },
            "tools": ["orders.lookup", "refund.issue"],
            "budgets": {"max_model_steps": 6, "max_tool_calls": 4, "timeout_s": 60},
        },
    },
}
