"""A final answer is one signal, not the decision (R4.3).

Before a run may complete, its answer must match the agent's output schema and
pass every output guardrail and postcondition hook. A failure ends the run with
the reason, or, where the agent says so, earns one corrective model step first.
COMPLETED is never the result of an answer that failed a check.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jsonschema

from runtime_server.core import Event, Phase, corrective_step, end_events
from runtime_server.core import events as ev

if TYPE_CHECKING:
    from runtime_server.engine._driver import RunDriver


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why an answer was not accepted: a stable reason and the details."""

    reason: str
    detail: str


def finalize(driver: RunDriver, answer: str, *, corrected: bool) -> None:
    """Append what follows a final answer: COMPLETED, a corrective step, or FAILED."""
    state = driver.state
    rejection = check(driver, answer)
    if rejection is None:
        ending = end_events(state, Phase.COMPLETED, "final_answer", output=answer)
        ref = state.answer_ref
        if ref is not None:  # the answer is a payload: the output is the same one
            ending = tuple(
                Event(e.type, {**e.data, "output_ref": ref}) if e.type == ev.RUN_COMPLETED else e
                for e in ending
            )
        driver.add(*ending)
    elif not corrected and driver.agent.config.output.on_failure == "correct":
        driver.add(corrective_step(state, f"{rejection.reason}: {rejection.detail}"))
    else:
        driver.add(*end_events(state, Phase.FAILED, rejection.reason, message=rejection.detail))


def check(driver: RunDriver, answer: str) -> Rejection | None:
    """The first check the answer fails, or None."""
    config = driver.agent.config.output
    if config.schema_ is not None:
        try:
            jsonschema.validate(json.loads(answer), config.schema_)
        except ValueError:
            return Rejection("output_invalid", "the answer is not JSON")
        except jsonschema.ValidationError as exc:
            where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
            return Rejection("output_invalid", f"{where}: {exc.message}")
    hooks = driver.engine.policies.pm.hook
    common: dict[str, Any] = {
        "agent_name": driver.agent.name,
        "input": driver.state.input,
        "output": answer,
        "options": config.options,
    }
    failures = [r for r in hooks.agentrt_output_guardrail(**common) if r]
    if failures:
        return Rejection("guardrail_failed", "; ".join(failures))
    failures = [r for r in hooks.agentrt_postcondition(**common, tool_results=tool_results(driver)) if r]
    if failures:
        return Rejection("postcondition_failed", "; ".join(failures))
    return None


def tool_results(driver: RunDriver) -> list[dict[str, Any]]:
    """Every tool result of the run so far, in order, as the hooks see them."""
    tools = {c: t for entry in driver.state.history for c, t, _ in entry.tool_calls}
    results = []
    for entry in driver.state.history:
        if entry.role == "tool":
            results.append(
                {
                    "tool": tools.get(entry.tool_call_id, ""),
                    "call_id": entry.tool_call_id,
                    "ok": not entry.failed,
                    "result_json": entry.content,
                }
            )
    return results
