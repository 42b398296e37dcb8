"""The policy plugin manager and the one question the engine asks it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pluggy

from agentrt.server.core import loads_bounded
from agentrt.server.policies import hookspecs
from agentrt.server.policies._types import ApprovalRequirement

#: Entry-point group of policy plugins (each hook family has its own).
ENTRYPOINT_GROUP = hookspecs.PROJECT_NAME


def get_policy_plugin_manager(*, entrypoints: bool = True) -> pluggy.PluginManager:
    """A fresh manager with the policy hookspecs and the plugins of the ``agentrt.policies`` group.

    Raises:
        pluggy.PluginValidationError: A plugin implements a policy hook that does not exist (a
            misspelled name) or with arguments the hookspec does not have.
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    if entrypoints:
        pm.load_setuptools_entrypoints(ENTRYPOINT_GROUP)
    pm.check_pending()
    return pm


class Policies:
    """Asks the policy plugins; falls back to the tool's own flag."""

    def __init__(self, pm: pluggy.PluginManager):
        self.pm = pm

    def approval(
        self, *, tool: str, arguments_json: str, agent_name: str, options: Mapping[str, Any], flagged: bool
    ) -> ApprovalRequirement:
        arguments = _arguments(arguments_json)
        answer: ApprovalRequirement | None = self.pm.hook.agentrt_approval_policy(
            tool=tool, arguments=arguments, agent_name=agent_name, options=options
        )
        if answer is not None:
            return ApprovalRequirement(
                required=answer.required or flagged,
                reason=answer.reason,
                policy_version=answer.policy_version,
            )
        return ApprovalRequirement(required=flagged, reason="the tool requires approval" if flagged else "")

    def output_guardrail(
        self, *, agent_name: str, input: str, output: str, options: Mapping[str, Any]
    ) -> list[Any]:
        """Each plugin's verdict on a final answer: falsy passes, anything else is the failure."""
        answers: list[Any] = self.pm.hook.agentrt_output_guardrail(
            agent_name=agent_name, input=input, output=output, options=options
        )
        return answers

    def postcondition(
        self,
        *,
        agent_name: str,
        input: str,
        output: str,
        options: Mapping[str, Any],
        tool_results: list[dict[str, Any]],
    ) -> list[Any]:
        """Each plugin's verdict on what the run did: falsy passes, anything else is the failure."""
        answers: list[Any] = self.pm.hook.agentrt_postcondition(
            agent_name=agent_name, input=input, output=output, options=options, tool_results=tool_results
        )
        return answers

    def summarise(
        self,
        *,
        agent_name: str,
        entries: Sequence[Mapping[str, Any]],
        max_bytes: int,
        options: Mapping[str, Any],
    ) -> str | None:
        """The first summariser plugin's summary of ``entries``, or None when no plugin gives one."""
        answer = self.pm.hook.agentrt_summarise(
            agent_name=agent_name, entries=entries, max_bytes=max_bytes, options=options
        )
        return answer if isinstance(answer, str) and answer else None

    def cleanup(
        self, *, name: str, arguments: Mapping[str, Any], run_id: str, tenant_id: str, attempt: int
    ) -> bool | None:
        """The first plugin's answer for cleanup hook ``name`` (None: none handles it). Blocking."""
        answer = self.pm.hook.agentrt_cleanup(
            name=name, arguments=arguments, run_id=run_id, tenant_id=tenant_id, attempt=attempt
        )
        return None if answer is None else bool(answer)

    def recheck_approved(
        self,
        *,
        tool: str,
        arguments_json: str,
        agent_name: str,
        options: Mapping[str, Any],
        run_variables: Mapping[str, str | float | bool],
        read_tool: Callable[[str, Mapping[str, Any]], Any],
    ) -> str | None:
        """The first plugin's veto of an approved call (its reason), or None. Blocking; may raise."""
        veto: str | None = self.pm.hook.agentrt_recheck_approved(
            tool=tool,
            arguments=_arguments(arguments_json),
            agent_name=agent_name,
            options=options,
            run_variables=dict(run_variables),
            read_tool=read_tool,
        )
        return str(veto) if veto else None


def _arguments(arguments_json: str) -> dict[str, Any]:
    try:
        arguments = loads_bounded(arguments_json or "{}")
    except ValueError:  # not JSON, or past the bounds: the decider refuses the call anyway
        return {}
    return arguments if isinstance(arguments, dict) else {}
