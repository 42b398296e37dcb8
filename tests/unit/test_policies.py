"""Approval policy hooks: documented, first result wins, the tool's flag is the fallback."""

from __future__ import annotations

import inspect

from agentrt.server.policies import (
    ApprovalRequirement,
    Policies,
    get_policy_plugin_manager,
    hookimpl,
    hookspecs,
)


def test_policy_hooks_are_documented_with_their_parameters() -> None:
    names = sorted(n for n in dir(hookspecs) if n.startswith("agentrt_"))
    assert names == [
        "agentrt_approval_policy",
        "agentrt_cleanup",
        "agentrt_output_guardrail",
        "agentrt_postcondition",
        "agentrt_recheck_approved",
        "agentrt_summarise",
    ]
    for name in names:
        spec = getattr(hookspecs, name)
        doc = inspect.getdoc(spec) or ""
        for param in inspect.signature(spec).parameters:
            assert f":param {param}:" in doc, (name, param)
        assert ":return:" in doc
    assert "Stops at the" in (inspect.getdoc(hookspecs.agentrt_approval_policy) or "")
    assert "Stops at the first veto" in (inspect.getdoc(hookspecs.agentrt_recheck_approved) or "")


def test_the_shipped_refund_policy_and_the_tool_flag_fallback() -> None:
    policies = Policies(get_policy_plugin_manager())
    over = policies.approval(
        tool="refund.issue", arguments_json='{"amount": 30}', agent_name="a", options={}, flagged=False
    )
    assert over.required and over.policy_version == "refund-limit-1" and "over 25.00" in over.reason
    under = policies.approval(
        tool="refund.issue",
        arguments_json='{"amount": 30}',
        agent_name="a",
        options={"refund_limit": 100},
        flagged=False,
    )
    assert not under.required
    flagged = policies.approval(
        tool="orders.lookup", arguments_json="{}", agent_name="a", options={}, flagged=True
    )
    assert flagged.required and flagged.reason == "the tool requires approval"
    malformed = policies.approval(
        tool="refund.issue", arguments_json="{not json", agent_name="a", options={}, flagged=False
    )
    assert not malformed.required  # the tool host rejects malformed arguments before anything runs


def test_a_plugin_can_require_approval_for_any_tool() -> None:
    class Strict:
        @hookimpl(optionalhook=True)
        def agentrt_approval_policy(self, tool: str) -> ApprovalRequirement | None:
            return ApprovalRequirement(required=True, reason="all calls", policy_version="strict-2")

    pm = get_policy_plugin_manager(entrypoints=False)
    pm.register(Strict())
    answer = Policies(pm).approval(
        tool="noop.echo", arguments_json="{}", agent_name="a", options={}, flagged=False
    )
    assert answer == ApprovalRequirement(required=True, reason="all calls", policy_version="strict-2")
