"""Policy hooks of the runtime (pluggy project "agentrt").

Plugins implement them with ``@hookimpl(optionalhook=True)`` so that a tool host,
which loads the same entry-point group, does not reject them as unknown hooks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pluggy

from agentrt.server.policies._types import ApprovalRequirement

#: The pluggy project and entry-point group of policies plugins (one per hook family).
PROJECT_NAME = "agentrt.policies"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec(firstresult=True)
def agentrt_approval_policy(
    tool: str, arguments: Mapping[str, Any], agent_name: str, options: Mapping[str, Any]
) -> ApprovalRequirement | None:
    """Decide whether a call needs a person's approval before it runs (DESIGN §7).

    Called once per tool call the model asks for, before the call starts. Stops at the
    first non-None result; with no answer, the tool's own ``requires_approval`` flag decides.

    :param tool: Tool name, e.g. ``refund.issue``.
    :param arguments: The call's arguments (parsed JSON object; do not mutate).
    :param agent_name: The agent making the call.
    :param options: The agent's ``approvals.options`` from the runtime config.
    :return: An :class:`ApprovalRequirement`, or None to leave the decision to others.
    """


@hookspec
def agentrt_output_guardrail(
    agent_name: str, input: str, output: str, options: Mapping[str, Any]
) -> str | None:
    """Check a final answer before the run may complete (R4.3). Every implementation is asked.

    :param agent_name: The agent that answered.
    :param input: The run's input.
    :param output: The final answer.
    :param options: The agent's ``output.options`` from the runtime config.
    :return: Why the answer must not be accepted, or None to accept it.
    """


@hookspec
def agentrt_postcondition(
    agent_name: str,
    input: str,
    output: str,
    tool_results: Sequence[Mapping[str, Any]],
    options: Mapping[str, Any],
) -> str | None:
    """Check that the world is as the answer claims before the run may complete. Every one is asked.

    :param agent_name: The agent that answered.
    :param input: The run's input.
    :param output: The final answer.
    :param tool_results: The run's tool results in order: ``{"tool", "call_id", "ok", "result_json"}``.
    :param options: The agent's ``output.options`` from the runtime config.
    :return: Which condition does not hold, or None.
    """


@hookspec(firstresult=True)
def agentrt_recheck_approved(
    tool: str,
    arguments: Mapping[str, Any],
    agent_name: str,
    options: Mapping[str, Any],
    run_variables: Mapping[str, str | float | bool],
    read_tool: Callable[[str, Mapping[str, Any]], Any],
) -> str | None:
    """Re-check an approved call right before it runs; veto it when the world moved on (S000).

    A person approved the call as they saw it; by the time it runs the resource may have
    changed (an order cancelled or refunded meanwhile), a permission been withdrawn, an
    identity expired. Called in a worker thread, once, right before the first attempt of a
    call a person approved. Stops at the first veto. A veto means the call never runs: the
    model sees ``tool.failed`` PERMANENT ``"vetoed: <reason>"``. A hook that raises vetoes
    too (``"vetoed: the re-check failed: ..."``): an approved effect is not run unchecked.

    :param tool: Tool name, e.g. ``refund.issue``.
    :param arguments: The call's arguments (parsed JSON object; do not mutate).
    :param agent_name: The agent making the call.
    :param options: The agent's ``approvals.options`` from the runtime config.
    :param run_variables: The run's variables now (business facts tools set; never secrets).
    :param read_tool: ``read_tool(name, arguments)`` calls a READ_ONLY tool the run's tool hosts
        serve, for the run (its tenant, its grants), and returns its parsed result. Raises
        :class:`~agentrt.server.policies.ReadToolError` when the tool is not read-only, fails
        or does not answer in time.
    :return: Why the call must not run, or None to let it run.
    """


@hookspec(firstresult=True)
def agentrt_summarise(
    agent_name: str, entries: Sequence[Mapping[str, Any]], max_bytes: int, options: Mapping[str, Any]
) -> str | None:
    """Summarise the history a model step's context window leaves out (``strategy = "summarise"``).

    Called before a model step whose prompt does not fit the model's context limit, with the
    entries left out, oldest first. The summary is recorded on the step's ``step.started``
    (``context.summary``) and shown to the model in their place; a replay reuses the recorded
    text and never asks again. Stops at the first non-None result; with none, the step keeps the
    recent turns only (``keep_recent``).

    :param agent_name: The agent whose step it is.
    :param entries: The entries left out: ``{"role", "content", "tool_call_id", "tool_calls"}``,
        where ``tool_calls`` lists ``{"call_id", "tool", "arguments_json"}`` (do not mutate).
    :param max_bytes: Longer summaries are cut to this many UTF-8 bytes (``context.summary_bytes``).
    :param options: The agent's ``context.options`` from the runtime config.
    :return: The summary text, or None to leave it to others.
    """


@hookspec(firstresult=True)
def agentrt_cleanup(
    name: str, arguments: Mapping[str, Any], run_id: str, tenant_id: str, attempt: int
) -> bool | None:
    """Release a resource a tool registered with ``{"hook": name, "arguments": {...}}`` (S002 §8).

    Called when the run's end is decided, before that end is committed (newest registration
    first), and again by the background cleanup job while it failed. Runs in a worker thread,
    within ``[cleanup] call_timeout_s``. Make it idempotent: after a crash it may be called again
    for a resource it already released. Stops at the first non-None result.

    :param name: The hook name the tool gave; answer None for names this plugin does not own.
    :param arguments: The arguments the tool gave (do not mutate).
    :param run_id: The run that registered it.
    :param tenant_id: The run's tenant.
    :param attempt: 1 for the first attempt.
    :return: True when the resource is released (or was already); False when it is not and a
        retry will not help; None when this plugin does not handle ``name``. Raise for a failure
        a retry may fix.
    """
