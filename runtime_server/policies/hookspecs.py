"""Policy hooks of the runtime (pluggy project "agentrt").

Plugins implement them with ``@hookimpl(optionalhook=True)`` so that a tool host,
which loads the same entry-point group, does not reject them as unknown hooks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pluggy

from runtime_server.policies._types import ApprovalRequirement

hookspec = pluggy.HookspecMarker("agentrt")
hookimpl = pluggy.HookimplMarker("agentrt")


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
