"""Which calls the host obeys (DESIGN R3.3): the runtime's call grant, checked before anything else.

With grant keys, InvokeTool, GetOperation and PreviewTool each need a grant signed by a
trusted key (``x-agentrt-call-grant``). Its bindings must match the request exactly, and
the tenant and fencing token the host acts on come from the grant, never from a header
alone. The checks run before any ledger read or write and before any plugin code.

Without grant keys (loopback development) every call is obeyed as tenant "".
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable

from agentrt.toolhost._grants import GRANT_HEADER, CallGrant, GrantError, GrantVerifier, arguments_hash
from agentrt.toolhost._status import PermissionDenied, Unauthenticated

__all__ = ["CallGate", "GrantedCall", "grant_of"]

_log = logging.getLogger(__name__)

_MISMATCH = "GRANT_MISMATCH"


@dataclasses.dataclass(frozen=True, kw_only=True)
class GrantedCall:
    """What a call may act on once its grant holds."""

    tenant: str
    fencing_token: int | None
    # From the grant (a header alone is not believed): the run's session, and an approved override
    # of an earlier call's intent.
    session_id: str = ""
    intent_override: bool = False


def grant_of(metadata: Iterable[tuple[str, str | bytes]] | None) -> str:
    """The call grant among gRPC metadata pairs, or ""."""
    for key, value in metadata or ():
        if key.lower() == GRANT_HEADER and isinstance(value, str):
            return value.strip()
    return ""


class CallGate:
    """Checks call grants against requests.

    Args:
        verifier: Verifies grants against the trusted public keys; None obeys every call
            (development on loopback), as tenant "".
    """

    def __init__(self, *, verifier: GrantVerifier | None) -> None:
        self._verifier = verifier

    @property
    def verifying(self) -> bool:
        """True when calls need a grant."""
        return self._verifier is not None

    def _verify(self, token: str, method: str) -> CallGrant:
        assert self._verifier is not None
        try:
            return self._verifier.verify(token)
        except GrantError as exc:
            # The reason only: the grant itself (and the caller's other headers) stay out of logs.
            _log.warning("%s refused: %s (%s)", method, exc.message, exc.reason)
            if exc.reason == _MISMATCH:
                raise PermissionDenied(exc.message, reason=exc.reason) from None
            raise Unauthenticated(exc.message, reason=exc.reason) from None

    @staticmethod
    def _require(method: str, mismatched: list[str]) -> None:
        if mismatched:
            _log.warning("%s refused: the call grant does not match %s", method, ", ".join(mismatched))
            raise PermissionDenied(
                f"the call grant does not match the call's {', '.join(mismatched)}",
                reason=_MISMATCH,
                metadata={"fields": ",".join(mismatched)},
            )

    def invoke(
        self,
        *,
        grant: str,
        tool: str,
        arguments_json: str,
        idempotency_key: str,
        run_id: str,
        call_id: str,
        fencing_token: int | None,
    ) -> GrantedCall:
        """Check an InvokeTool call: every binding of its grant must match.

        Raises:
            Unauthenticated: No grant, or one that is malformed, expired or signed by an unknown key.
            PermissionDenied: A genuine grant for another call (reason ``GRANT_MISMATCH``).
        """
        if self._verifier is None:
            return GrantedCall(tenant="", fencing_token=fencing_token)
        granted = self._verify(grant, "InvokeTool")
        mismatched = [
            name
            for name, same in (
                ("tool", granted.tool == tool),
                ("arguments_json", granted.args_hash == arguments_hash(arguments_json)),
                ("idempotency_key", granted.idempotency_key == idempotency_key),
                ("run_id", granted.run_id == run_id),
                ("call_id", granted.call_id == call_id),
                ("fencing_token", granted.fencing_token == fencing_token),
            )
            if not same
        ]
        self._require("InvokeTool", mismatched)
        return GrantedCall(
            tenant=granted.tenant,
            fencing_token=granted.fencing_token,
            session_id=granted.session_id,
            intent_override=granted.intent_override,
        )

    def get_operation(self, *, grant: str, idempotency_key: str) -> tuple[str, str | None]:
        """Check a GetOperation call.

        Returns:
            The tenant whose ledger entry it may read, and the run whose entry it is (None without
            grant keys: any run's).

        Raises:
            Unauthenticated: As for :meth:`invoke`.
            PermissionDenied: The grant names another idempotency key.
        """
        granted = self._keyed("GetOperation", grant, idempotency_key)
        return ("", None) if granted is None else (granted.tenant, granted.run_id)

    def cancel_operation(self, *, grant: str, idempotency_key: str) -> tuple[str, str | None, int | None]:
        """Check a CancelOperation call, exactly as GetOperation.

        Returns:
            The tenant it may cancel in, the run whose operation it may stop, and the fencing
            token the grant carries (None for both without grant keys: any run's, unfenced).

        Raises:
            Unauthenticated: As for :meth:`invoke`.
            PermissionDenied: The grant names another idempotency key.
        """
        granted = self._keyed("CancelOperation", grant, idempotency_key)
        if granted is None:
            return "", None, None
        return granted.tenant, granted.run_id, granted.fencing_token

    def _keyed(self, method: str, grant: str, idempotency_key: str) -> CallGrant | None:
        if self._verifier is None:
            return None
        granted = self._verify(grant, method)
        self._require(method, [] if granted.idempotency_key == idempotency_key else ["idempotency_key"])
        return granted

    def preview(self, *, grant: str, tool: str, arguments_json: str) -> str:
        """Check a PreviewTool call (its tool and exact arguments); returns its tenant.

        Raises:
            Unauthenticated: As for :meth:`invoke`.
            PermissionDenied: The grant names another tool or other arguments.
        """
        if self._verifier is None:
            return ""
        granted = self._verify(grant, "PreviewTool")
        mismatched = [
            name
            for name, same in (
                ("tool", granted.tool == tool),
                ("arguments_json", granted.args_hash == arguments_hash(arguments_json)),
            )
            if not same
        ]
        self._require("PreviewTool", mismatched)
        return granted.tenant
