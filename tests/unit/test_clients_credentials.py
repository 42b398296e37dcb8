"""How a client resolves its channel security: options, AGENTRT_* defaults, files, and refusals."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from agentrt.client import AsyncClient, Client, CredentialsError
from agentrt.client._credentials import CLIENT_ENV_VARS, ChannelSecurity, is_loopback_target, resolve_security
from agentrt.server.config import load_settings
from agentrt.toolhost.security import DevPki, generate_dev_pki

TOKEN = "s3cr3t-token-value"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> DevPki:
    return generate_dev_pki(tmp_path_factory.mktemp("pki"), clients=["alice"])


def alice(pki: DevPki) -> tuple[str, str]:
    cert, key = pki.client_files["alice"]
    return str(cert), str(key)


def test_nothing_given_is_plaintext_without_token() -> None:
    security = resolve_security("127.0.0.1:50051", environ={})
    assert (security.tls, security.token, security.channel_credentials()) == (False, "", None)
    assert security.call_metadata() == () and security.describe() == "plaintext"


def test_ca_and_client_certificate_make_mtls(pki: DevPki) -> None:
    cert, key = alice(pki)
    security = resolve_security(
        "runtime.example:443", ca_file=str(pki.ca_file), cert_file=cert, key_file=key, environ={}
    )
    assert security.tls and security.root_certificates == pki.ca_file.read_bytes()
    assert security.certificate_chain == Path(cert).read_bytes()
    assert security.private_key == Path(key).read_bytes()
    assert isinstance(security.channel_credentials(), grpc.ChannelCredentials)
    assert security.describe() == "mtls"


def test_defaults_come_from_the_environment(pki: DevPki, tmp_path: Path) -> None:
    cert, key = alice(pki)
    token_file = tmp_path / "token"
    token_file.write_text(f"  {TOKEN}  \nsecond line ignored\n")
    env = {
        "AGENTRT_CA": str(pki.ca_file),
        "AGENTRT_CERT": cert,
        "AGENTRT_KEY": key,
        "AGENTRT_TOKEN_FILE": str(token_file),
        "AGENTRT_SERVER_NAME": "localhost",
    }
    security = resolve_security("10.0.0.5:50051", environ=env)
    assert security.tls and security.certificate_chain is not None
    assert (security.token, security.server_name) == (TOKEN, "localhost")
    assert security.channel_options() == [("grpc.ssl_target_name_override", "localhost")]
    assert security.describe() == "mtls token"
    # Over TLS the token travels as call credentials, not as plain metadata.
    assert security.call_metadata() == ()


def test_options_win_over_the_environment_and_empty_turns_one_off(pki: DevPki) -> None:
    env = {"AGENTRT_CA": "/nonexistent/ca.pem", "AGENTRT_TOKEN": "from-env"}
    security = resolve_security("127.0.0.1:1", ca_file="", token=TOKEN, environ=env)
    assert (security.tls, security.token) == (False, TOKEN)
    security = resolve_security("127.0.0.1:1", ca_file=str(pki.ca_file), token="", environ=env)
    assert (security.tls, security.token) == (True, "")


def test_token_over_plaintext_goes_only_to_loopback() -> None:
    security = resolve_security("localhost:50051", token=TOKEN, environ={})
    assert security.call_metadata() == (("authorization", f"Bearer {TOKEN}"),)
    for target in ("10.1.2.3:50051", "runtime.example:50051", "dns:///runtime.example:443"):
        with pytest.raises(CredentialsError, match="refusing to send a token in clear") as caught:
            resolve_security(target, token=TOKEN, environ={})
        assert TOKEN not in str(caught.value) and target in str(caught.value)
    with pytest.raises(CredentialsError, match="in clear"):
        resolve_security("10.1.2.3:50051", environ={"AGENTRT_TOKEN": TOKEN})


def test_tls_with_system_roots_carries_a_token_anywhere() -> None:
    security = resolve_security("runtime.example:443", tls=True, token=TOKEN, environ={})
    assert security.tls and security.root_certificates is None and security.describe() == "tls token"
    assert resolve_security("runtime.example:443", environ={"AGENTRT_TLS": "yes"}).tls
    assert not resolve_security("127.0.0.1:1", environ={"AGENTRT_TLS": "0"}).tls


@pytest.mark.parametrize(
    ("target", "loopback"),
    [
        ("127.0.0.1:50051", True),
        ("127.8.9.10:1", True),
        ("localhost:50051", True),
        ("[::1]:50051", True),
        ("::1", True),
        ("dns:///localhost:50051", True),
        ("dns://8.8.8.8/127.0.0.1:50051", True),
        ("ipv4:127.0.0.1:1,127.0.0.2:2", True),
        ("ipv6:[::1]:50051", True),
        ("unix:/run/agentrt.sock", True),
        ("unix-abstract:agentrt", True),
        ("10.0.0.1:50051", False),
        ("0.0.0.0:50051", False),
        ("localhost.evil.example:50051", False),
        ("[2001:db8::1]:50051", False),
        ("ipv4:127.0.0.1:1,10.0.0.1:2", False),
        ("dns:///runtime.example:443", False),
        ("xds:///runtime", False),
    ],
)
def test_is_loopback_target(target: str, loopback: bool) -> None:
    assert is_loopback_target(target) is loopback


def test_unusable_files_are_named(pki: DevPki, tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    with pytest.raises(CredentialsError, match=f"cannot read CA file {missing}: No such file"):
        resolve_security("127.0.0.1:1", ca_file=str(missing), environ={})
    not_pem = tmp_path / "ca.txt"
    not_pem.write_text("hello")
    with pytest.raises(CredentialsError, match=f"CA file {not_pem} is not PEM"):
        resolve_security("127.0.0.1:1", ca_file=str(not_pem), environ={})
    cert, _ = alice(pki)
    with pytest.raises(CredentialsError, match=f"cannot read client key file {missing}"):
        resolve_security("127.0.0.1:1", cert_file=cert, key_file=str(missing), environ={})
    with pytest.raises(CredentialsError, match=r"cannot read token file .*nope\.pem"):
        resolve_security("127.0.0.1:1", environ={"AGENTRT_TOKEN_FILE": str(missing)})


def test_an_unreadable_token_file_is_named(tmp_path: Path) -> None:
    unreadable = tmp_path / "token"
    unreadable.write_text(TOKEN)
    unreadable.chmod(0)
    try:
        if _readable(unreadable):
            pytest.skip("running as root: permissions are not enforced")
        with pytest.raises(CredentialsError, match=f"cannot read token file {unreadable}: Permission denied"):
            resolve_security("127.0.0.1:1", token_file=str(unreadable), environ={})
    finally:
        unreadable.chmod(0o600)


def _readable(path: Path) -> bool:
    try:
        path.read_bytes()
    except PermissionError:
        return False
    return True


def test_bad_tokens_and_token_files_never_echo_the_token(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n" + TOKEN)
    with pytest.raises(CredentialsError, match="has no token on its first line") as caught:
        resolve_security("127.0.0.1:1", token_file=str(empty), environ={})
    assert TOKEN not in str(caught.value)
    spaced = tmp_path / "spaced"
    spaced.write_text(f"{TOKEN} extra\n")
    with pytest.raises(CredentialsError, match="not allowed in a header") as caught:
        resolve_security("127.0.0.1:1", token_file=str(spaced), environ={})
    assert TOKEN not in str(caught.value)
    with pytest.raises(CredentialsError, match="not allowed in a header") as caught:
        resolve_security("127.0.0.1:1", token=f"{TOKEN}\r\nx-injected: 1", environ={})
    assert TOKEN not in str(caught.value)


def test_conflicting_options_are_refused(pki: DevPki, tmp_path: Path) -> None:
    cert, key = alice(pki)
    cases: list[tuple[dict[str, object], dict[str, str], str]] = [
        ({"cert_file": cert}, {}, "a client certificate needs its key too"),
        ({}, {"AGENTRT_KEY": key}, "a client key needs its certificate too"),
        ({"token": TOKEN, "token_file": str(tmp_path / "t")}, {}, "one of token and token_file"),
        (
            {},
            {"AGENTRT_TOKEN": TOKEN, "AGENTRT_TOKEN_FILE": "t"},
            "one of AGENTRT_TOKEN and AGENTRT_TOKEN_FILE",
        ),
        ({"server_name": "x"}, {}, "server name is given but the connection is plaintext"),
        ({"tls": False, "ca_file": str(pki.ca_file)}, {}, "TLS is turned off"),
        ({}, {"AGENTRT_TLS": "maybe"}, "AGENTRT_TLS must be"),
    ]
    for options, env, message in cases:
        with pytest.raises(CredentialsError, match=message) as caught:
            resolve_security("127.0.0.1:1", environ=env, **options)  # type: ignore[arg-type]
        assert TOKEN not in str(caught.value)


def test_token_and_key_stay_out_of_reprs(pki: DevPki) -> None:
    cert, key = alice(pki)
    security = resolve_security(
        "127.0.0.1:1", ca_file=str(pki.ca_file), cert_file=cert, key_file=key, token=TOKEN, environ={}
    )
    assert TOKEN not in repr(security) and "PRIVATE KEY" not in repr(security)
    with Client("127.0.0.1:1", token=TOKEN) as client:
        assert repr(client) == "Client(target='127.0.0.1:1', security='plaintext token')"
    assert TOKEN not in repr(ChannelSecurity(target="x", token=TOKEN))


async def test_async_client_takes_the_same_options(pki: DevPki, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = alice(pki)
    monkeypatch.setenv("AGENTRT_CA", str(pki.ca_file))
    async with AsyncClient("127.0.0.1:1", cert_file=cert, key_file=key, token=TOKEN) as client:
        assert repr(client) == "AsyncClient(target='127.0.0.1:1', security='mtls token')"
    with pytest.raises(CredentialsError, match="in clear"):
        AsyncClient("10.9.9.9:1", ca_file="", token=TOKEN)


def test_a_ready_channel_takes_no_security_options() -> None:
    channel = grpc.insecure_channel("127.0.0.1:1")
    try:
        with pytest.raises(CredentialsError, match="ca_file, token cannot be combined with a ready channel"):
            Client(channel=channel, ca_file="ca.pem", token=TOKEN)
        # The environment's credentials are not applied to a channel made elsewhere.
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("AGENTRT_TOKEN", TOKEN)
            mp.setenv("AGENTRT_CA", "/nonexistent")
            client = Client("127.0.0.1:1", channel=channel)
            assert repr(client) == "Client(target='127.0.0.1:1', security='plaintext')"
    finally:
        channel.close()


def test_token_with_an_authorization_metadata_entry_is_ambiguous() -> None:
    with pytest.raises(CredentialsError, match="not both"):
        Client("127.0.0.1:1", token=TOKEN, metadata=[("Authorization", "Bearer other")])


def test_hints_follow_the_failure_and_the_options(pki: DevPki) -> None:
    refused = "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:1: Socket closed"
    unavailable = grpc.StatusCode.UNAVAILABLE
    plain = resolve_security("127.0.0.1:1", environ={})
    assert "give its CA" in plain.hint(unavailable, refused)
    tls = resolve_security("127.0.0.1:1", ca_file=str(pki.ca_file), environ={})
    assert "requires a client certificate" in tls.hint(unavailable, refused)
    cert, key = alice(pki)
    mtls = resolve_security("127.0.0.1:1", ca_file=str(pki.ca_file), cert_file=cert, key_file=key, environ={})
    assert "signed by the CA the server trusts" in mtls.hint(unavailable, refused)
    verify = "failed to connect to all addresses; last error: ... CERTIFICATE_VERIFY_FAILED: unable to get"
    assert "against the given CA" in tls.hint(unavailable, verify)
    other_ca = (
        "failed to connect ... SSL_ERROR_SSL: error:1a000064:ECDSA routines:OPENSSL_internal:BAD_SIGNATURE"
    )
    assert "against the given CA" in tls.hint(unavailable, other_ca)
    handshake = "failed to connect to all addresses; last error: Tls handshake failed (TSI_PROTOCOL_FAILURE)"
    assert "the TLS handshake failed" in tls.hint(unavailable, handshake)
    system = resolve_security("127.0.0.1:1", tls=True, environ={})
    assert "system's CAs" in system.hint(unavailable, verify)
    name = "failed to connect to all addresses; last error: ... Hostname Verification Check failed."
    assert "--server-name" in tls.hint(unavailable, name)
    assert "serving plaintext" in tls.hint(unavailable, "failed to connect ... WRONG_VERSION_NUMBER")
    assert plain.hint(unavailable, "Connection refused") == ""
    assert "no credential was sent" in plain.hint(grpc.StatusCode.UNAUTHENTICATED, "missing credential")
    assert mtls.hint(grpc.StatusCode.UNAUTHENTICATED, "unknown certificate") == ""
    assert plain.hint(grpc.StatusCode.NOT_FOUND, refused) == ""


def test_the_server_config_loader_ignores_the_client_variables(tmp_path: Path) -> None:
    env = {name: "1" for name in CLIENT_ENV_VARS} | {"AGENTRT_TARGET": "10.0.0.1:1"}
    settings = load_settings(None, env=env)
    assert not settings.tls.enabled
