"""Client certificates (mTLS) mapped to principals by configuration."""

from __future__ import annotations

from collections.abc import Mapping

from agentrt.server.auth._authentication import AuthRequest
from agentrt.server.auth._principal import Principal
from agentrt.server.config import MtlsPrincipalConfig
from agentrt.server.core import NotAuthenticated

__all__ = ["MtlsAuthenticator"]


class MtlsAuthenticator:
    """Maps a verified client certificate's names to a configured principal.

    The certificate's names are its subject common name and SANs as ``CN=<name>``,
    ``DNS:<name>``, ``URI:<uri>`` (a SPIFFE id, say) and ``IP:<address>``, compared exactly.
    The first configured name (in configuration order) that the certificate carries decides;
    the principal's subject is the configured ``subject``, else that name.

    The certificate was verified by the TLS handshake against ``[tls] client_ca_file``; this
    only maps it. A call without a certificate is not this authenticator's; a certificate that
    maps to nothing is refused with ``UNKNOWN_CLIENT_CERTIFICATE``.

    Args:
        mapping: Certificate name -> principal configuration.
    """

    name = "mtls"

    def __init__(self, *, mapping: Mapping[str, MtlsPrincipalConfig]) -> None:
        # Principals are built once: a call costs a few set lookups.
        self._principals = tuple(
            (
                cert_name,
                Principal(
                    subject=config.subject or cert_name,
                    tenant=config.tenant,
                    roles=frozenset(config.roles),
                    authenticated_by="mtls",
                ),
            )
            for cert_name, config in mapping.items()
        )

    def authenticate(self, request: AuthRequest) -> Principal | None:
        """The certificate's principal; None for a call without a verified client certificate.

        Raises:
            NotAuthenticated: ``UNKNOWN_CLIENT_CERTIFICATE``: no configured name is on the certificate.
        """
        if request.peer is None:
            return None
        names = set(request.peer.names)
        for cert_name, principal in self._principals:
            if cert_name in names:
                return principal
        shown = ", ".join(request.peer.names[:4])[:300] or "no names"
        raise NotAuthenticated(
            f"the client certificate ({shown}) is not mapped to a principal on this server",
            reason="UNKNOWN_CLIENT_CERTIFICATE",
            metadata={"authenticator": "mtls"},
        )
