"""A final answer is one signal, not the decision (R4.3).

Before a run may complete, its answer must match the agent's output schema and
pass every output guardrail and postcondition hook. A failure ends the run with
the reason, or, where the agent says so, earns one corrective model step first.
COMPLETED is never the result of an answer that failed a check.

A hook that *raises* did not judge the answer: that is ``guardrail_error:<class>``,
not a rejection. The run ends FAILED at once, not retryable and without a corrective
step: hooks are deterministic in the answer, the input and the tool results, so a
retry or a reclaim would raise again (before, it crashed the driver on every reclaim).
The model step that produced the answer is committed with the end, so its usage counts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jsonschema

from agentrt.server.core import (
    RESULT_JSON_LIMITS,
    JsonBoundsError,
    Phase,
    corrective_step,
    end_events,
    fault_message,
    loads_bounded,
)
from agentrt.server.engine._run import RunContext


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why an answer was not accepted: a stable reason and the details."""

    reason: str
    detail: str
    error: bool = False  # a hook raised: guardrail_error, never corrected


log = logging.getLogger("agentrt.engine")


def finalize(ctx: RunContext, answer: str, *, corrected: bool) -> None:
    """Append what follows a final answer: COMPLETED, a corrective step, or FAILED."""
    state = ctx.state
    rejection = check(ctx, answer)
    if rejection is None:
        # When the answer is a payload, the output is the same one.
        ctx.add(
            *end_events(state, Phase.COMPLETED, "final_answer", output=answer, output_ref=state.answer_ref)
        )
    elif not corrected and not rejection.error and ctx.agent.config.output.on_failure == "correct":
        ctx.add(corrective_step(state, f"{rejection.reason}: {rejection.detail}"))
    else:
        ctx.add(*end_events(state, Phase.FAILED, rejection.reason, message=rejection.detail))


def check(ctx: RunContext, answer: str) -> Rejection | None:
    """The first check the answer fails, or None."""
    config = ctx.agent.config.output
    if config.schema_ is not None:
        try:
            jsonschema.validate(loads_bounded(answer, RESULT_JSON_LIMITS), config.schema_)
        except JsonBoundsError as exc:
            return Rejection("output_invalid", f"the answer is not JSON within bounds: {exc}")
        except jsonschema.ValidationError as exc:
            where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
            return Rejection("output_invalid", f"{where}: {exc.message}")
    policies = ctx.ports.policies
    agent_name, given = ctx.agent.name, ctx.state.input
    answers = _ask(
        "output guardrail",
        lambda: policies.output_guardrail(
            agent_name=agent_name, input=given, output=answer, options=config.options
        ),
    )
    if isinstance(answers, Rejection):
        return answers
    failures = [str(r) for r in answers if r]
    if failures:
        return Rejection("guardrail_failed", "; ".join(failures))
    results = tool_results(ctx)
    answers = _ask(
        "postcondition",
        lambda: policies.postcondition(
            agent_name=agent_name, input=given, output=answer, options=config.options, tool_results=results
        ),
    )
    if isinstance(answers, Rejection):
        return answers
    failures = [str(r) for r in answers if r]
    if failures:
        return Rejection("postcondition_failed", "; ".join(failures))
    return None


def _ask(kind: str, call: Callable[[], list[Any]]) -> list[Any] | Rejection:
    """The hooks' answers, or the guardrail_error of one that raised (a broken check is no verdict)."""
    try:
        return call()
    except Exception as exc:
        log.exception("%s hook raised", kind)
        name = type(exc).__name__
        detail = fault_message(name, str(exc), f"{kind} hook")
        return Rejection(f"guardrail_error:{name[:100]}", detail, error=True)


def tool_results(ctx: RunContext) -> list[dict[str, Any]]:
    """Every tool result of the run so far, in order, as the hooks see them."""
    tools = {c: t for entry in ctx.state.history for c, t, _ in entry.tool_calls}
    results = []
    for entry in ctx.state.history:
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
