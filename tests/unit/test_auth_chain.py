"""The authentication chain: precedence of credentials, malformed headers, mTLS mapping, local mode."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

import agentrt.server.auth as auth
from agentrt.server.auth import (
    METHOD_PERMISSIONS,
    ROLE_PERMISSIONS,
    Authentication,
    AuthRequest,
    MtlsAuthenticator,
    Permission,
    Principal,
    allowed,
    bearer_token,
    build_authentication,
    get_auth_plugin_manager,
    hash_token,
    hookimpl,
    local_principal,
    permission_for,
)
from agentrt.server.config import AuthConfig, JwtConfig, MtlsPrincipalConfig
from agentrt.server.core import NotAuthenticated
from agentrt.toolhost.security import PeerCertificate

TOKEN = "static-token-5b1d2c"
SIGNER = ed25519.Ed25519PrivateKey.generate()
PUBLIC_PEM = (
    SIGNER.public_key()
    .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    .decode()
)
METHOD = "/agentrt.runtime.v1.AgentRuntimeService/GetRun"


def a_jwt(**claims: object) -> str:
    payload = {"iss": "idp", "aud": "rt", "exp": int(time.time()) + 60, "sub": "jay", "tenant": "jwt-t"}
    payload.update(claims)
    return jwt.encode(payload, SIGNER, algorithm="EdDSA")


class Plugin:
    def __init__(self) -> None:
        self.asked = 0

    @hookimpl
    def agentrt_authenticate(
        self, metadata: Mapping[str, str], peer_names: tuple[str, ...]
    ) -> Principal | None:
        self.asked += 1
        if metadata.get("authorization") == "Bearer plugin-token" or metadata.get("x-plugin") == "1":
            return Principal(subject="plug", tenant="p", roles=frozenset({"runner"}), authenticated_by="plug")
        if "CN=plugin-client" in peer_names:
            return Principal(
                subject="plug-cert", tenant="p", roles=frozenset({"runner"}), authenticated_by="plug"
            )
        return None


def tokens_file(tmp_path: Path) -> str:
    path = tmp_path / "tokens.toml"
    path.write_text(
        f'[[tokens]]\nsha256 = "{hash_token(TOKEN)}"\nsubject = "tok"\ntenant = "tok-t"\nroles = ["runner"]\n'
    )
    return str(path)


MTLS = {
    "URI:spiffe://acme/ops": MtlsPrincipalConfig(tenant="acme", roles=["operator"], subject="ops-bot"),
    "CN=ci": MtlsPrincipalConfig(tenant="acme", roles=["runner"]),
}


def full_chain(tmp_path: Path, plugin: Plugin) -> Authentication:
    pm = get_auth_plugin_manager(entrypoints=False)
    pm.register(plugin)
    config = AuthConfig(
        tokens_file=tokens_file(tmp_path),
        jwt=JwtConfig(public_keys=[PUBLIC_PEM], issuer="idp", audience="rt"),
        mtls=MTLS,
        plugins=True,
    )
    return build_authentication(config, local=None, plugin_manager=pm)


def call(metadata: dict[str, str] | None = None, names: tuple[str, ...] | None = None) -> AuthRequest:
    peer = PeerCertificate(names=names) if names is not None else None
    return AuthRequest(method=METHOD, metadata=metadata or {}, peer=peer)


def refused(authentication: Authentication, request: AuthRequest) -> NotAuthenticated:
    with pytest.raises(NotAuthenticated) as caught:
        authentication.authenticate(request)
    return caught.value


def test_the_authorization_header_decides_and_a_bad_one_never_falls_through(tmp_path: Path) -> None:
    plugin = Plugin()
    chain = full_chain(tmp_path, plugin)
    ops_cert = ("CN=ops", "URI:spiffe://acme/ops")
    # A good bearer token wins over a certificate and the plugins.
    assert chain.authenticate(call({"authorization": f"Bearer {TOKEN}"}, ops_cert)).subject == "tok"
    assert chain.authenticate(call({"authorization": f"bearer {a_jwt()}"}, ops_cert)).subject == "jay"
    # A bad one is refused even though the certificate (or a plugin) would have been good.
    assert refused(chain, call({"authorization": "Bearer nope"}, ops_cert)).reason == "TOKEN_UNKNOWN"
    assert refused(chain, call({"authorization": "Bearer nope", "x-plugin": "1"})).reason == "TOKEN_UNKNOWN"
    expired = a_jwt(exp=int(time.time()) - 3600)
    assert refused(chain, call({"authorization": f"Bearer {expired}"}, ops_cert)).reason == "TOKEN_EXPIRED"
    # Static tokens are configured, so opaque tokens never reach the plugins.
    assert refused(chain, call({"authorization": "Bearer plugin-token"})).reason == "TOKEN_UNKNOWN"
    assert plugin.asked == 0


def test_without_a_header_the_certificate_decides_then_the_plugins(tmp_path: Path) -> None:
    plugin = Plugin()
    chain = full_chain(tmp_path, plugin)
    ops = chain.authenticate(call(names=("CN=ops", "URI:spiffe://acme/ops")))
    assert (ops.subject, ops.tenant, ops.roles, ops.authenticated_by) == (
        "ops-bot",
        "acme",
        frozenset({"operator"}),
        "mtls",
    )
    assert chain.authenticate(call(names=("CN=ci",))).subject == "CN=ci"  # defaults to the matched name
    unknown = refused(chain, call({"x-plugin": "1"}, ("CN=plugin-client",)))
    assert unknown.reason == "UNKNOWN_CLIENT_CERTIFICATE" and plugin.asked == 0
    assert chain.authenticate(call({"x-plugin": "1"})).subject == "plug"
    assert refused(chain, call()).reason == "UNAUTHENTICATED"
    assert plugin.asked == 2


def test_the_first_configured_certificate_name_wins() -> None:
    mtls = MtlsAuthenticator(mapping=MTLS)
    both = mtls.authenticate(call(names=("CN=ci", "URI:spiffe://acme/ops")))
    assert both is not None and both.subject == "ops-bot"  # configuration order, not certificate order
    assert mtls.authenticate(call()) is None
    with pytest.raises(NotAuthenticated) as caught:
        mtls.authenticate(call(names=("CN=CI", "DNS:ci")))  # names compare exactly
    assert caught.value.reason == "UNKNOWN_CLIENT_CERTIFICATE" and "CN=CI" in caught.value.message


def test_plugins_see_a_bearer_token_only_when_no_built_in_authenticator_takes_it(tmp_path: Path) -> None:
    plugin = Plugin()
    pm = get_auth_plugin_manager(entrypoints=False)
    pm.register(plugin)
    chain = build_authentication(AuthConfig(plugins=True, mtls=MTLS), local=None, plugin_manager=pm)
    assert chain.authenticate(call({"authorization": "Bearer plugin-token"})).subject == "plug"
    assert refused(chain, call({"authorization": "Bearer other"})).reason == "TOKEN_UNKNOWN"
    # A certificate the mTLS table does not know is refused; the plugins only see calls without one.
    assert refused(chain, call(names=("CN=plugin-client",))).reason == "UNKNOWN_CLIENT_CERTIFICATE"
    assert chain.authenticate(call({"x-plugin": "1"})).subject == "plug"


def test_plugins_may_map_certificates_when_mtls_is_not_configured() -> None:
    pm = get_auth_plugin_manager(entrypoints=False)
    pm.register(Plugin())
    chain = build_authentication(AuthConfig(plugins=True), local=None, plugin_manager=pm)
    assert chain.authenticate(call(names=("CN=plugin-client",))).subject == "plug-cert"


def test_a_server_without_bearer_authenticators_refuses_bearer_tokens() -> None:
    chain = build_authentication(AuthConfig(mtls=MTLS), local=None)
    presented = call({"authorization": f"Bearer {TOKEN}"}, ("CN=ci",))
    problem = refused(chain, presented)
    assert problem.reason == "BEARER_NOT_ACCEPTED" and TOKEN not in problem.message


def test_a_jwt_shaped_token_goes_to_static_tokens_when_jwt_is_not_configured(tmp_path: Path) -> None:
    chain = build_authentication(AuthConfig(tokens_file=tokens_file(tmp_path)), local=None)
    assert refused(chain, call({"authorization": f"Bearer {a_jwt()}"})).reason == "TOKEN_UNKNOWN"


@pytest.mark.parametrize(
    "value",
    [
        "",
        "Bearer",
        "Bearer ",
        "Bearer    ",
        f"Basic {TOKEN}",
        f"Token {TOKEN}",
        f"Bearer {TOKEN} extra",
        f"Bearer\t{TOKEN}",
        f"Bearer {TOKEN}\u00e9",
        "Bearer " + "a" * 8200,
    ],
)
def test_a_malformed_authorization_header_is_refused_without_echoing_it(tmp_path: Path, value: str) -> None:
    chain = build_authentication(AuthConfig(tokens_file=tokens_file(tmp_path)), local=None)
    problem = refused(chain, call({"authorization": value}, ("CN=ci",)))
    assert problem.reason == "MALFORMED_AUTHORIZATION", problem.message
    assert TOKEN not in problem.message and "a" * 50 not in problem.message


def test_bearer_token_accepts_any_scheme_case_and_surrounding_space() -> None:
    assert bearer_token(f"  BEARER   {TOKEN} ") == TOKEN
    assert bearer_token(f"Bearer {'a' * 8000}") == "a" * 8000


def test_local_mode_answers_for_everyone_and_needs_no_credential() -> None:
    local = local_principal("default")
    chain = build_authentication(AuthConfig(), local=local)
    assert chain.authenticate(call()) is local
    assert chain.authenticate(call({"authorization": "garbage"})) is local
    assert refused(build_authentication(AuthConfig(), local=None), call()).reason == "UNAUTHENTICATED"


def test_configured_auth_never_falls_back_to_local(tmp_path: Path) -> None:
    chain = build_authentication(AuthConfig(tokens_file=tokens_file(tmp_path)), local=local_principal("d"))
    assert refused(chain, call()).reason == "UNAUTHENTICATED"


def test_every_role_may_introspect_and_permissions_follow_the_table() -> None:
    reflection = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
    assert permission_for(reflection) is Permission.INTROSPECT
    assert (
        permission_for("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")
        is Permission.INTROSPECT
    )
    assert permission_for("/agentrt.runtime.v1.AgentRuntimeService/Unknown") is None
    for role in ROLE_PERMISSIONS:
        assert allowed(frozenset({role}), Permission.INTROSPECT)
    assert not allowed(frozenset(), Permission.INTROSPECT)
    assert not allowed(frozenset({"runner"}), Permission.RESOLVE_APPROVALS)
    assert allowed(frozenset({"admin"}), METHOD_PERMISSIONS[METHOD])


def test_the_package_exports_a_complete_sorted_all() -> None:
    exported = list(auth.__all__)
    assert len(exported) == len(set(exported)) and all(hasattr(auth, name) for name in exported)

    def order(name: str) -> tuple[int, str]:
        if name.upper() == name:
            return (0, name)
        return (1, name) if name[:1].isupper() else (2, name)

    assert exported == sorted(exported, key=order)
    public = {
        name
        for name, value in vars(auth).items()
        if not name.startswith("_")
        and name != "annotations"
        and not isinstance(value, type(auth))
        and str(getattr(value, "__module__", "agentrt.server.auth")).startswith("agentrt.server.auth")
    }
    assert sorted(public - set(exported)) == []
