"""Security primitives shared by the tool host and the runtime: TLS material, call grants and
payload encryption at rest."""

from __future__ import annotations

from agentrt.toolhost._cipher import CipherError, PayloadCipher, write_key_file
from agentrt.toolhost._grants import (
    AUDIENCE,
    DEFAULT_MAX_GRANT_LIFETIME_S,
    GRANT_HEADER,
    MAX_FENCING_TOKEN,
    CallGrant,
    GrantError,
    GrantSigner,
    GrantVerifier,
    arguments_hash,
    key_id,
    public_key_pem,
    write_signing_key,
)
from agentrt.toolhost._tls import (
    DevPki,
    PeerCertificate,
    ReloadingServerCredentials,
    TlsFileError,
    channel_credentials,
    dev_pki_paths,
    generate_dev_pki,
    is_loopback_host,
    issue_certificate,
    peer_certificate,
)

__all__ = [
    "AUDIENCE",
    "DEFAULT_MAX_GRANT_LIFETIME_S",
    "GRANT_HEADER",
    "MAX_FENCING_TOKEN",
    "CallGrant",
    "CipherError",
    "DevPki",
    "GrantError",
    "GrantSigner",
    "GrantVerifier",
    "PayloadCipher",
    "PeerCertificate",
    "ReloadingServerCredentials",
    "TlsFileError",
    "arguments_hash",
    "channel_credentials",
    "dev_pki_paths",
    "generate_dev_pki",
    "is_loopback_host",
    "issue_certificate",
    "key_id",
    "peer_certificate",
    "public_key_pem",
    "write_key_file",
    "write_signing_key",
]
