"""Example output guardrail and postcondition, driven by the agent's ``output.options``.

- ``forbidden_phrases``: a final answer containing one of them is rejected.
- ``require_successful_tool``: the run must contain a successful result of this tool
  (an agent that claims "refunded" must have a refund.issue that succeeded).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentrt.server.policies import hookimpl

__all__ = ["agentrt_output_guardrail", "agentrt_postcondition"]


@hookimpl(optionalhook=True)
def agentrt_output_guardrail(output: str, options: Mapping[str, Any]) -> str | None:
    """Reject answers that make promises the agent must not make."""
    found = [p for p in options.get("forbidden_phrases", []) if str(p).lower() in output.lower()]
    return f"the answer contains forbidden phrases {found}" if found else None


@hookimpl(optionalhook=True)
def agentrt_postcondition(
    tool_results: Sequence[Mapping[str, Any]], options: Mapping[str, Any]
) -> str | None:
    """The required tool must have succeeded at least once in the run."""
    required = options.get("require_successful_tool")
    if not required:
        return None
    if any(r["tool"] == required and r["ok"] for r in tool_results):
        return None
    return f"no successful {required} call backs the answer"
