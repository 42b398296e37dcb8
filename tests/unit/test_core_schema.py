"""Where a schema stands (core._schema): every state, and the words an operator reads."""

from __future__ import annotations

import pytest

from agentrt.server.core import UPGRADE_COMMAND, SchemaState, schema_verdict

KNOWN = ("0001", "0002", "0003")


@pytest.mark.parametrize(
    ("current", "state", "words"),
    [
        ((), SchemaState.EMPTY, "no agentrt schema yet (head is 0003)"),
        (("0002",), SchemaState.BEHIND, "at revision 0002, behind head 0003"),
        (("0001",), SchemaState.BEHIND, "at revision 0001, behind head 0003"),
        (("0003",), SchemaState.AT_HEAD, "at head revision 0003"),
        (("0099",), SchemaState.UNKNOWN, "0099, which this agentrt does not know (its head is 0003)"),
        # A known and an unknown head (a branch from elsewhere): no upgrade fixes that either.
        (("0003", "0099"), SchemaState.UNKNOWN, "0003, 0099"),
    ],
)
def test_verdicts(current: tuple[str, ...], state: SchemaState, words: str) -> None:
    verdict = schema_verdict(current=current, heads=("0003",), known=KNOWN)
    assert verdict.state is state and verdict.at_head is (state is SchemaState.AT_HEAD)
    message = verdict.message()
    assert words in message and "\n" not in message
    assert (UPGRADE_COMMAND in message) is (state in (SchemaState.EMPTY, SchemaState.BEHIND))
    if state is SchemaState.UNKNOWN:
        assert "agentrt migrate downgrade 0003" in message


def test_revisions_are_compared_as_sets() -> None:
    verdict = schema_verdict(current=["b", "a"], heads=["a", "b"], known={"a", "b"})
    assert verdict.at_head and verdict.current == ("a", "b")
