"""Every refusal class of the tool host maps to a google.rpc code, so its status carries details.

A class whose gRPC code had no entry made ``abort_with`` fail while aborting: the caller got
UNKNOWN with no ErrorInfo instead of the refusal.
"""

from __future__ import annotations

from agentrt.toolhost import _status


def _subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= _subclasses(sub)
    return found


def test_every_refusal_class_has_a_google_rpc_code() -> None:
    classes = _subclasses(_status.RpcFailure)
    assert classes, "no refusal classes found"
    missing = sorted(c.__name__ for c in classes if c.code not in _status._CODES)
    assert missing == []
