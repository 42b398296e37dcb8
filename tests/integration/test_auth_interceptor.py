"""The auth interceptor in a real grpc.aio server: credentials over the wire, roles, health,
reflection, mTLS over real TLS, and every RPC of the service covered by the permission table."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import jwt
import pluggy
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from google.rpc import error_details_pb2  # type: ignore[import-untyped]
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status

from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2, runtime_service_pb2_grpc
from agentrt.server.api._interceptor import AuthInterceptor
from agentrt.server.auth import (
    METHOD_PERMISSIONS,
    Authentication,
    AuthRequest,
    Principal,
    allowed,
    build_authentication,
    current_principal,
    get_auth_plugin_manager,
    hash_token,
    hookimpl,
    local_principal,
)
from agentrt.server.config import AuthConfig, JwtConfig, MtlsPrincipalConfig
from agentrt.toolhost.security import ReloadingServerCredentials, channel_credentials, generate_dev_pki

SERVICE = runtime_service_pb2.DESCRIPTOR.services_by_name["AgentRuntimeService"]
TOKENS = {
    "runner": "runner-token-7f3a9c21",
    "approver": "approver-token-0b8e44d2",
    "other-tenant": "zeta-token-c0ffee11",
}
SIGNER = ec.generate_private_key(ec.SECP256R1())
PUBLIC_PEM = (
    SIGNER.public_key()
    .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    .decode()
)


@dataclass
class Seen:
    """What the handlers ran for: a refused call must leave this empty."""

    calls: list[tuple[str, Principal]] = field(default_factory=list)


class EchoPrincipal(runtime_service_pb2_grpc.AgentRuntimeServiceServicer):
    """Answers with the principal the interceptor set: tenant in ``tenant_id``, subject in ``created_by``."""

    def __init__(self, seen: Seen) -> None:
        self.seen = seen

    def _run(self, method: str, run_id: str) -> run_pb2.Run:
        principal = current_principal()
        self.seen.calls.append((method, principal))
        return run_pb2.Run(run_id=run_id, tenant_id=principal.tenant, created_by=principal.subject)

    async def RunAgent(
        self, request: runtime_service_pb2.RunAgentRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[runtime_service_pb2.RunAgentResponse]:
        run = self._run("RunAgent", "new")
        yield runtime_service_pb2.RunAgentResponse(
            event=run_pb2.RunEvent(run_id=f"{run.tenant_id}/{run.created_by}")
        )

    async def StartRun(
        self, request: runtime_service_pb2.StartRunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> runtime_service_pb2.StartRunResponse:
        return runtime_service_pb2.StartRunResponse(run=self._run("StartRun", "new"))

    async def GetRun(
        self, request: runtime_service_pb2.GetRunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> runtime_service_pb2.GetRunResponse:
        await asyncio.sleep(0)  # let concurrent calls interleave
        return runtime_service_pb2.GetRunResponse(run=self._run("GetRun", request.run_id))

    async def ListRuns(
        self, request: runtime_service_pb2.ListRunsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> runtime_service_pb2.ListRunsResponse:
        return runtime_service_pb2.ListRunsResponse(runs=[self._run("ListRuns", "any")])

    async def StreamRunEvents(
        self, request: runtime_service_pb2.StreamRunEventsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[runtime_service_pb2.StreamRunEventsResponse]:
        run = self._run("StreamRunEvents", request.run_id)
        for seq in (1, 2):
            yield runtime_service_pb2.StreamRunEventsResponse(
                event=run_pb2.RunEvent(run_id=f"{run.tenant_id}/{run.created_by}", seq=seq)
            )

    async def CancelRun(
        self, request: runtime_service_pb2.CancelRunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> runtime_service_pb2.CancelRunResponse:
        return runtime_service_pb2.CancelRunResponse(run=self._run("CancelRun", request.run_id))

    async def ResolveApproval(
        self, request: runtime_service_pb2.ResolveApprovalRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> runtime_service_pb2.ResolveApprovalResponse:
        return runtime_service_pb2.ResolveApprovalResponse(run=self._run("ResolveApproval", request.run_id))

    async def ResolveOutcome(
        self, request: runtime_service_pb2.ResolveOutcomeRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> runtime_service_pb2.ResolveOutcomeResponse:
        return runtime_service_pb2.ResolveOutcomeResponse(run=self._run("ResolveOutcome", request.run_id))

    async def GetPayload(
        self, request: runtime_service_pb2.GetPayloadRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[runtime_service_pb2.GetPayloadResponse]:
        run = self._run("GetPayload", request.run_id)
        yield runtime_service_pb2.GetPayloadResponse(data=f"{run.tenant_id}/{run.created_by}".encode())


def tokens_file(tmp_path: Path) -> str:
    entries = [
        ("runner", "acme", "runner"),
        ("approver", "acme", "approver"),
        ("other-tenant", "zeta", "runner"),
    ]
    text = "".join(
        f'[[tokens]]\nsha256 = "{hash_token(TOKENS[key])}"\nsubject = "{key}"\n'
        f'tenant = "{tenant}"\nroles = ["{role}"]\n'
        for key, tenant, role in entries
    )
    path = tmp_path / "tokens.toml"
    path.write_text(text)
    return str(path)


@dataclass
class Served:
    address: str
    seen: Seen


@asynccontextmanager
async def serving(
    authentication: Authentication, *, credentials: grpc.ServerCredentials | None = None
) -> AsyncIterator[Served]:
    seen = Seen()
    server = grpc.aio.server(interceptors=[AuthInterceptor(authentication)])
    runtime_service_pb2_grpc.add_AgentRuntimeServiceServicer_to_server(EchoPrincipal(seen), server)
    health_servicer = health.aio.HealthServicer()  # type: ignore[attr-defined]
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE.full_name, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    if credentials is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        port = server.add_secure_port("127.0.0.1:0", credentials)
    await server.start()
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    try:
        yield Served(address=f"127.0.0.1:{port}", seen=seen)
    finally:
        await server.stop(None)


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def refusal(error: grpc.aio.AioRpcError) -> tuple[grpc.StatusCode, str, Mapping[str, str]]:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None, "no google.rpc.Status in the trailers"
    info = error_details_pb2.ErrorInfo()
    assert status.details and status.details[0].Unpack(info)
    assert info.domain == "runtime.agentrt"
    return error.code(), info.reason, dict(info.metadata)


async def refused(call: Any) -> tuple[grpc.StatusCode, str, Mapping[str, str]]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        result = call
        if hasattr(result, "__aiter__"):
            async for _ in result:
                pass
        else:
            await result
    return refusal(caught.value)


@pytest.fixture()
def chain(tmp_path: Path) -> Authentication:
    return build_authentication(
        AuthConfig(
            tokens_file=tokens_file(tmp_path),
            jwt=JwtConfig(public_keys=[PUBLIC_PEM], issuer="idp", audience="agentrt"),
        ),
        local=None,
    )


def test_every_rpc_of_the_service_has_a_permission() -> None:
    methods = {f"/{SERVICE.full_name}/{method.name}" for method in SERVICE.methods}
    assert methods == set(METHOD_PERMISSIONS)


def stub_for(channel: grpc.aio.Channel, method: Any) -> Any:
    request_class = getattr(runtime_service_pb2, method.input_type.name)
    response_class = getattr(runtime_service_pb2, method.output_type.name)
    path = f"/{SERVICE.full_name}/{method.name}"
    if method.server_streaming:
        return channel.unary_stream(path, request_class.SerializeToString, response_class.FromString)
    return channel.unary_unary(path, request_class.SerializeToString, response_class.FromString)


async def test_every_rpc_needs_a_credential_and_the_role_its_permission_names(chain: Authentication) -> None:
    async with serving(chain) as served, grpc.aio.insecure_channel(served.address) as channel:
        for method in SERVICE.methods:
            request = getattr(runtime_service_pb2, method.input_type.name)()
            call = stub_for(channel, method)
            code, reason, _ = await refused(call(request, timeout=10))
            assert (code, reason) == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED"), method.name
            assert served.seen.calls == []
            permission = METHOD_PERMISSIONS[f"/{SERVICE.full_name}/{method.name}"]
            for role in ("runner", "approver"):
                metadata = bearer(TOKENS[role])
                if allowed(frozenset({role}), permission):
                    reply = call(request, metadata=metadata, timeout=10)
                    replies = [r async for r in reply] if method.server_streaming else [await reply]
                    assert replies, (method.name, role)
                    assert served.seen.calls.pop() == (method.name, served_principal(chain, role))
                else:
                    code, reason, _ = await refused(call(request, metadata=metadata, timeout=10))
                    assert (code, reason) == (grpc.StatusCode.PERMISSION_DENIED, "MISSING_ROLE"), method.name
                    assert served.seen.calls == []


def served_principal(chain: Authentication, role: str) -> Principal:
    return chain.authenticate(AuthRequest(method="/m", metadata=dict(bearer(TOKENS[role])), peer=None))


async def test_tokens_over_the_wire_give_the_handler_its_principal(
    chain: Authentication, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with serving(chain) as served, grpc.aio.insecure_channel(served.address) as channel:
        stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channel)
        reply = await stub.GetRun(
            runtime_service_pb2.GetRunRequest(run_id="r1"), metadata=bearer(TOKENS["runner"])
        )
        assert (reply.run.tenant_id, reply.run.created_by) == ("acme", "runner")

        signed = jwt.encode(
            {
                "iss": "idp",
                "aud": "agentrt",
                "exp": int(time.time()) + 60,
                "sub": "jay",
                "tenant": "jwt-t",
                "roles": "runner",
            },
            SIGNER,
            algorithm="ES256",
        )
        reply = await stub.GetRun(runtime_service_pb2.GetRunRequest(run_id="r2"), metadata=bearer(signed))
        assert (reply.run.tenant_id, reply.run.created_by) == ("jwt-t", "jay")

        events = [
            item.event.run_id
            async for item in stub.StreamRunEvents(
                runtime_service_pb2.StreamRunEventsRequest(run_id="r1"), metadata=bearer(TOKENS["approver"])
            )
        ]
        assert events == ["acme/approver", "acme/approver"]
        seen = len(served.seen.calls)

        bad = "made-up-token-31337"
        code, reason, _ = await refused(
            stub.GetRun(runtime_service_pb2.GetRunRequest(run_id="r1"), metadata=bearer(bad))
        )
        assert (code, reason) == (grpc.StatusCode.UNAUTHENTICATED, "TOKEN_UNKNOWN")
        expired = jwt.encode(
            {"iss": "idp", "aud": "agentrt", "exp": int(time.time()) - 3600, "sub": "jay", "tenant": "t"},
            SIGNER,
            algorithm="ES256",
        )
        code, reason, _ = await refused(
            stub.StreamRunEvents(
                runtime_service_pb2.StreamRunEventsRequest(run_id="r1"), metadata=bearer(expired)
            )
        )
        assert (code, reason) == (grpc.StatusCode.UNAUTHENTICATED, "TOKEN_EXPIRED")
        for metadata, expected in [
            ((("authorization", "Basic dXNlcjpwYXNz"),), "MALFORMED_AUTHORIZATION"),
            ((("authorization", "Bearer "),), "MALFORMED_AUTHORIZATION"),
            (bearer(TOKENS["runner"]) + bearer(TOKENS["approver"]), "MALFORMED_AUTHORIZATION"),
        ]:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.GetRun(runtime_service_pb2.GetRunRequest(run_id="r1"), metadata=metadata)
            assert refusal(caught.value)[:2] == (grpc.StatusCode.UNAUTHENTICATED, expected)
            assert TOKENS["runner"] not in (caught.value.details() or "")
        assert len(served.seen.calls) == seen  # no refused call reached a handler
    for secret in (*TOKENS.values(), bad, signed, expired):
        assert secret not in caplog.text


async def test_an_oversized_authorization_header_never_reaches_a_handler(chain: Authentication) -> None:
    async with serving(chain) as served, grpc.aio.insecure_channel(served.address) as channel:
        stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetRun(runtime_service_pb2.GetRunRequest(run_id="r1"), metadata=bearer("a" * 9000))
        # gRPC's own header limit may answer before the interceptor does; either way it is refused.
        if caught.value.code() == grpc.StatusCode.UNAUTHENTICATED:
            assert refusal(caught.value)[1] == "MALFORMED_AUTHORIZATION"
        else:
            assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert served.seen.calls == []


async def test_a_missing_role_is_permission_denied_with_the_permission_named(chain: Authentication) -> None:
    async with serving(chain) as served, grpc.aio.insecure_channel(served.address) as channel:
        stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channel)
        request = runtime_service_pb2.ResolveApprovalRequest(run_id="r1", approval_id="a1")
        code, reason, metadata = await refused(
            stub.ResolveApproval(request, metadata=bearer(TOKENS["runner"]))
        )
        assert (code, reason) == (grpc.StatusCode.PERMISSION_DENIED, "MISSING_ROLE")
        assert metadata == {"permission": "resolve_approvals", "subject": "runner"}
        assert served.seen.calls == []
        reply = await stub.ResolveApproval(request, metadata=bearer(TOKENS["approver"]))
        assert reply.run.created_by == "approver"


async def test_concurrent_calls_each_see_their_own_principal(chain: Authentication) -> None:
    async with serving(chain) as served, grpc.aio.insecure_channel(served.address) as channel:
        stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channel)
        names = ["runner", "approver", "other-tenant"] * 10
        replies = await asyncio.gather(
            *(
                stub.GetRun(runtime_service_pb2.GetRunRequest(run_id=name), metadata=bearer(TOKENS[name]))
                for name in names
            )
        )
        assert [(r.run.run_id, r.run.created_by) for r in replies] == [(n, n) for n in names]
        assert {r.run.tenant_id for r in replies if r.run.created_by == "other-tenant"} == {"zeta"}
        assert len(served.seen.calls) == len(names)


async def reflect(channel: grpc.aio.Channel, metadata: Sequence[tuple[str, str]] = ()) -> list[str]:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    call = stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), metadata=metadata, timeout=10
    )
    return [s.name for reply in [r async for r in call] for s in reply.list_services_response.service]


async def test_health_needs_no_credential_but_reflection_does(chain: Authentication) -> None:
    async with serving(chain) as served, grpc.aio.insecure_channel(served.address) as channel:
        checked = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""))
        assert checked.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await reflect(channel)
        assert refusal(caught.value)[:2] == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
        assert SERVICE.full_name in await reflect(channel, bearer(TOKENS["runner"]))


async def test_local_mode_lets_every_loopback_caller_in_as_local(tmp_path: Path) -> None:
    authentication = build_authentication(AuthConfig(), local=local_principal("default"))
    async with serving(authentication) as served, grpc.aio.insecure_channel(served.address) as channel:
        stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channel)
        reply = await stub.ResolveApproval(runtime_service_pb2.ResolveApprovalRequest(run_id="r"))
        assert (reply.run.tenant_id, reply.run.created_by) == ("default", "local")
        assert SERVICE.full_name in await reflect(channel)


class FailingPlugin:
    @hookimpl
    def agentrt_authenticate(self, metadata: Mapping[str, str]) -> Principal | None:
        presented = metadata.get("x-api-key")
        if presented is None:
            return None
        raise RuntimeError(f"backend down while checking {presented}")


async def test_a_failing_plugin_refuses_the_call_and_logs_no_credential(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pm: pluggy.PluginManager = get_auth_plugin_manager(entrypoints=False)
    pm.register(FailingPlugin())
    authentication = build_authentication(AuthConfig(plugins=True), local=None, plugin_manager=pm)
    secret = "api-key-must-not-be-logged"
    async with serving(authentication) as served, grpc.aio.insecure_channel(served.address) as channel:
        stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channel)
        code, reason, _ = await refused(
            stub.GetRun(runtime_service_pb2.GetRunRequest(run_id="r"), metadata=(("x-api-key", secret),))
        )
        assert (code, reason) == (grpc.StatusCode.UNAUTHENTICATED, "AUTH_FAILED")
        assert served.seen.calls == []
    assert "RuntimeError" in caplog.text and "agentrt_authenticate" in caplog.text
    assert secret not in caplog.text


async def test_mtls_maps_a_verified_client_certificate_to_a_principal(tmp_path: Path) -> None:
    pki = generate_dev_pki(tmp_path / "pki", clients=("ops-bot", "stranger"))
    authentication = build_authentication(
        AuthConfig(
            tokens_file=tokens_file(tmp_path),
            mtls={"CN=ops-bot": MtlsPrincipalConfig(tenant="acme", roles=["operator"])},
        ),
        local=None,
    )
    credentials = ReloadingServerCredentials(
        cert_file=str(pki.server_cert_file),
        key_file=str(pki.server_key_file),
        client_ca_file=str(pki.ca_file),
    )

    def client(name: str) -> grpc.ChannelCredentials:
        cert, key = pki.client_files[name]
        return channel_credentials(ca_file=str(pki.ca_file), cert_file=str(cert), key_file=str(key))

    async with serving(authentication, credentials=credentials.credentials) as served:
        async with grpc.aio.secure_channel(served.address, client("ops-bot")) as channel:
            stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channel)
            reply = await stub.GetRun(runtime_service_pb2.GetRunRequest(run_id="r"), timeout=10)
            assert (reply.run.tenant_id, reply.run.created_by) == ("acme", "CN=ops-bot")
            assert served.seen.calls[-1][1].authenticated_by == "mtls"
            # The operator may not approve.
            code, reason, _ = await refused(
                stub.ResolveApproval(runtime_service_pb2.ResolveApprovalRequest(run_id="r"), timeout=10)
            )
            assert (code, reason) == (grpc.StatusCode.PERMISSION_DENIED, "MISSING_ROLE")
            # A bearer token on the same connection decides instead of the certificate.
            reply = await stub.GetRun(
                runtime_service_pb2.GetRunRequest(run_id="r"),
                metadata=bearer(TOKENS["other-tenant"]),
                timeout=10,
            )
            assert (reply.run.tenant_id, reply.run.created_by) == ("zeta", "other-tenant")
        calls = len(served.seen.calls)
        async with grpc.aio.secure_channel(served.address, client("stranger")) as channel:
            stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channel)
            code, reason, _ = await refused(
                stub.GetRun(runtime_service_pb2.GetRunRequest(run_id="r"), timeout=10)
            )
            assert (code, reason) == (grpc.StatusCode.UNAUTHENTICATED, "UNKNOWN_CLIENT_CERTIFICATE")
        # Without a client certificate the TLS handshake itself fails.
        no_cert = channel_credentials(ca_file=str(pki.ca_file))
        async with grpc.aio.secure_channel(served.address, no_cert) as channel:
            stub = runtime_service_pb2_grpc.AgentRuntimeServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.GetRun(
                    runtime_service_pb2.GetRunRequest(run_id="r"),
                    metadata=bearer(TOKENS["runner"]),
                    timeout=10,
                )
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert len(served.seen.calls) == calls
