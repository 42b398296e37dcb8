"""The security part of the runtime configuration: who may call, over what, with which keys.

Every section is off (empty) by default. With nothing configured and a loopback
``listen`` address the server trusts its local callers (the demo and tests need no
setup); anywhere else ``agentrt serve`` refuses to start without TLS and an
authenticator unless ``--insecure`` is given (DESIGN R10.2).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentrt.toolhost.security import DEFAULT_MAX_GRANT_LIFETIME_S

Role = Literal["runner", "approver", "operator", "admin"]
ROLES: tuple[Role, ...] = ("runner", "approver", "operator", "admin")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TlsConfig(_Strict):
    """TLS of the runtime API. Files are re-read when they change, so certificates rotate live."""

    cert_file: str = ""  # PEM certificate chain the server presents
    key_file: str = ""  # its PEM private key
    client_ca_file: str = ""  # set: every client must present a certificate signed by this CA (mTLS)

    @property
    def enabled(self) -> bool:
        return bool(self.cert_file)

    @model_validator(mode="after")
    def _pairs(self) -> TlsConfig:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("give both cert_file and key_file, or neither")
        if self.client_ca_file and not self.cert_file:
            raise ValueError("client_ca_file needs cert_file and key_file (mTLS is TLS first)")
        return self


class JwtConfig(_Strict):
    """JWT bearer tokens, verified with PyJWT against a JWKS file or inline public keys."""

    jwks_file: str = ""  # a JSON Web Key Set; re-read when it changes
    public_keys: list[str] = Field(default_factory=list)  # inline PEM public keys
    algorithms: list[str] = Field(default_factory=lambda: ["RS256", "ES256", "EdDSA"])
    issuer: str = ""  # required "iss"
    audience: str = ""  # required "aud"
    leeway_s: float = Field(30.0, ge=0, le=600)  # clock skew allowed on exp / nbf / iat
    subject_claim: str = "sub"
    tenant_claim: str = "tenant"
    roles_claim: str = "roles"  # a list of role names, or one space-separated string

    @model_validator(mode="after")
    def _has_keys(self) -> JwtConfig:
        if not self.jwks_file and not self.public_keys:
            raise ValueError("give jwks_file or public_keys")
        if not self.issuer or not self.audience:
            raise ValueError("issuer and audience are required")
        if any(a.upper().startswith("HS") or a.lower() == "none" for a in self.algorithms):
            raise ValueError("only asymmetric algorithms are accepted (no HS*, no none)")
        return self


class MtlsPrincipalConfig(_Strict):
    """The principal a client certificate maps to."""

    tenant: str = Field(min_length=1, max_length=128)
    roles: list[Role] = Field(min_length=1)
    subject: str = ""  # defaults to the certificate name that matched


class ApproverScopeConfig(_Strict):
    """What one approver may resolve; an empty list means no limit on that axis."""

    agents: list[str] = Field(default_factory=list)
    tools: list[str] = Field(default_factory=list)


class AuthConfig(_Strict):
    """Authentication of runtime API callers (DESIGN R10.2).

    An ``authorization: Bearer`` header decides when present (a JWT-shaped token goes to the JWT
    verifier, any other to the static tokens); without one a client certificate decides, then
    ``agentrt_authenticate`` plugin hooks. A presented credential that is bad is refused and never
    falls through to another (see ``agentrt.server.auth._build``).
    """

    tokens_file: str = ""  # static bearer tokens, stored as sha256 hashes (see `agentrt auth hash-token`)
    jwt: JwtConfig | None = None
    # Certificate name -> principal. Names are "CN=<common name>", "DNS:<name>" or "URI:<uri>"
    # (e.g. a SPIFFE id), matched against the verified client certificate's subject and SANs.
    mtls: dict[str, MtlsPrincipalConfig] = Field(default_factory=dict)
    plugins: bool = False  # also ask agentrt_authenticate hooks of installed plugins
    approver_scopes: dict[str, ApproverScopeConfig] = Field(default_factory=dict)  # keyed by subject
    # A runner cancels only runs it started itself (operators and admins still cancel any run of
    # their tenant); off: any runner of the tenant may cancel any of its runs.
    own_runs_only: bool = False
    # Four eyes: nobody approves a call of a run it started itself (nor grants it more budget);
    # rejecting stays open. Off: a principal with the runner and approver roles may.
    four_eyes: bool = False

    @property
    def configured(self) -> bool:
        return bool(self.tokens_file or self.jwt is not None or self.mtls or self.plugins)


class GrantsConfig(_Strict):
    """Call grants the runtime signs for tool hosts (DESIGN R3.3).

    ``signing_key_file`` is a PEM Ed25519 private key; its key id is derived from the public
    key. Without one the runtime signs with a key it makes at start. The file is re-read when it
    changes. These settings concern tool hosts at an address: a host the runtime spawns always
    gets a key pair of its own, made at its start, and obeys only this runtime, even with
    ``enabled = false``.

    ``ttl_s`` is at most what a tool host accepts by default (``--grant-max-lifetime``): a grant
    is checked when a call arrives, so a tool may run longer than its grant lives.
    """

    enabled: bool = True
    signing_key_file: str = ""
    ttl_s: float = Field(60.0, gt=0, le=DEFAULT_MAX_GRANT_LIFETIME_S)


class EncryptionConfig(_Strict):
    """Payload encryption at rest (AES-256-GCM).

    ``key_file`` is JSON: ``{"active": "k2", "keys": {"k1": "<base64 32 bytes>", "k2": "..."}}``.
    New records use the active key; older records are read with the key named in them.
    """

    key_file: str = ""


class ModelProfileConfig(_Strict):
    """A model endpoint configured on the server; agents (and inline agents) name it."""

    provider: str = Field(min_length=1)
    name: str = ""
    options: dict[str, Any] = Field(default_factory=dict)  # may hold base_url, api_key_env, ...
    inline_options: list[str] = Field(default_factory=list)  # option keys inline agents may set
    context_tokens: int = Field(0, ge=0)  # the model's context limit in tokens; 0: none enforced


def _admin_only() -> list[Role]:
    return ["admin"]


class InlineAgentsConfig(_Strict):
    """Agents sent in a request instead of configured here: off unless enabled."""

    enabled: bool = False
    roles: list[Role] = Field(default_factory=_admin_only)  # who may send one
    tools: list[str] = Field(default_factory=list)  # the tools an inline agent may be given
    agents: list[str] = Field(default_factory=list)  # configured agents it may hand off to or call
