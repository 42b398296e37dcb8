"""Fault injection for the tool host: a TEST FACILITY, off unless the variable is set.

``AGENTRT_TOOLHOST_FAULT=after_effect`` (or ``after_effect:TOOL``) hard-exits the
host right after a tool returned successfully and before its outcome is recorded
in the ledger or sent: the effect happened, nobody was told. Never set it in production.
"""

from __future__ import annotations

import os
import sys

FAULT_ENV = "AGENTRT_TOOLHOST_FAULT"
FAULT_EXIT_CODE = 86


def crash_after_effect(tool: str) -> None:
    """Exit here when the switch names this moment (and this tool, if it names one)."""
    spec = os.environ.get(FAULT_ENV, "")
    if not spec:
        return
    point, _, only = spec.partition(":")
    if point == "after_effect" and only in ("", tool):
        print(
            f"agentrt-toolhost: fault injection after the effect of {tool}; exiting",
            file=sys.stderr,
            flush=True,
        )
        os._exit(FAULT_EXIT_CODE)
