"""Values of the policy hooks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRequirement:
    """A policy's answer for one call."""

    required: bool
    reason: str = ""
    policy_version: str = "1"


class ReadToolError(Exception):
    """A re-check's ``read_tool`` could not read: not a read-only tool, a tool error, no answer."""
