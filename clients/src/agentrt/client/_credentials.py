"""How a client reaches the runtime safely: TLS files, a bearer token, and their ``AGENTRT_*`` defaults.

Every option left as None falls back to its environment variable; an empty string turns
it off even when the variable is set. The files are read once, when the client is made,
so a wrong path fails at once, naming the file.

The token is sent as ``authorization: Bearer <token>`` on every call. Over TLS it goes as
gRPC call credentials (gRPC itself refuses those on an unencrypted channel); over plaintext
it is allowed only to a loopback target, where it never crosses a network, and is sent as
call metadata. The token never appears in a repr, a log line or an error message.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import grpc

from agentrt.client._errors import CredentialsError

ENV_CA: Final = "AGENTRT_CA"
ENV_CERT: Final = "AGENTRT_CERT"
ENV_KEY: Final = "AGENTRT_KEY"
ENV_TOKEN: Final = "AGENTRT_TOKEN"
ENV_TOKEN_FILE: Final = "AGENTRT_TOKEN_FILE"
ENV_SERVER_NAME: Final = "AGENTRT_SERVER_NAME"
ENV_TLS: Final = "AGENTRT_TLS"

CLIENT_ENV_VARS: Final = frozenset(
    {ENV_CA, ENV_CERT, ENV_KEY, ENV_TOKEN, ENV_TOKEN_FILE, ENV_SERVER_NAME, ENV_TLS}
)
"""The environment variables the client reads (besides ``AGENTRT_TARGET``)."""

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChannelSecurity:
    """What a client's channel is made with, resolved from options and environment.

    Attributes:
        target: Where the channel connects.
        tls: Whether the channel is encrypted.
        root_certificates: PEM of the CA the server is verified against; None: the system's roots.
        certificate_chain: PEM of the client certificate (mTLS), or None.
        private_key: PEM of its key, or None.
        server_name: The name the server's certificate is checked against, if not the target's host.
        token: The bearer token, "" for none.
    """

    target: str
    tls: bool = False
    root_certificates: bytes | None = None
    certificate_chain: bytes | None = None
    private_key: bytes | None = dataclasses.field(default=None, repr=False)
    server_name: str = ""
    token: str = dataclasses.field(default="", repr=False)

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        """Credentials for ``grpc.secure_channel``; None for a plaintext channel."""
        if not self.tls:
            return None
        credentials = grpc.ssl_channel_credentials(
            root_certificates=self.root_certificates,
            private_key=self.private_key,
            certificate_chain=self.certificate_chain,
        )
        if self.token:
            credentials = grpc.composite_channel_credentials(
                credentials, grpc.access_token_call_credentials(self.token)
            )
        return credentials

    def channel_options(self) -> list[tuple[str, str]]:
        """Channel arguments: the TLS name override, when one is set."""
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []

    def call_metadata(self) -> tuple[tuple[str, str], ...]:
        """Metadata to add to every call: the token over a plaintext loopback channel, else none."""
        if self.token and not self.tls:
            return (("authorization", f"Bearer {self.token}"),)
        return ()

    def hint(self, code: grpc.StatusCode, message: str) -> str:
        """What to check when a call failed with ``code`` and ``message``; "" when nothing applies.

        Connection failures caused by TLS look alike on the wire (often just "Socket closed");
        the options this client was made with tell which one is likely.
        """
        if code == grpc.StatusCode.UNAUTHENTICATED and not self.token and not self.certificate_chain:
            return (
                "no credential was sent: give a token (token_file, --token-file or AGENTRT_TOKEN_FILE) "
                "or a client certificate (cert_file and key_file, --cert and --key)"
            )
        if code != grpc.StatusCode.UNAVAILABLE or "failed to connect" not in message:
            return ""
        if "Hostname Verification" in message:
            return (
                f"the server's certificate does not name the host of {self.target}: give the name it "
                "carries (server_name, --server-name or AGENTRT_SERVER_NAME)"
            )
        if any(
            sign in message
            for sign in ("CERTIFICATE_VERIFY_FAILED", "BAD_SIGNATURE", "certificate signature")
        ):
            if self.root_certificates is None:
                return (
                    "the server's certificate did not verify against the system's CAs: "
                    "give its CA (ca_file, --ca or AGENTRT_CA)"
                )
            return (
                "the server's certificate did not verify against the given CA: is it the CA that signed it?"
            )
        if "WRONG_VERSION_NUMBER" in message:
            return "the server does not answer TLS: is it serving plaintext (no [tls] configured)?"
        if "handshake failed" in message.lower():
            return "the TLS handshake failed: check the CA, the client certificate and its key"
        if "Socket closed" in message or "Connection reset" in message:
            if not self.tls:
                return (
                    "the server closed the connection: if it serves TLS, give its CA "
                    "(ca_file, --ca or AGENTRT_CA)"
                )
            if not self.certificate_chain:
                return (
                    "the server closed the TLS connection: if it requires a client certificate (mTLS), "
                    "give one (cert_file and key_file, --cert and --key)"
                )
            return (
                "the server closed the TLS connection: is the client certificate valid and signed by "
                "the CA the server trusts for clients?"
            )
        return ""

    def describe(self) -> str:
        """A short, secret-free summary, e.g. ``mtls token`` or ``plaintext``."""
        parts = ["mtls" if self.certificate_chain else "tls" if self.tls else "plaintext"]
        if self.token:
            parts.append("token")
        return " ".join(parts)


def resolve_security(
    target: str,
    *,
    ca_file: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
    token: str | None = None,
    token_file: str | None = None,
    server_name: str | None = None,
    tls: bool | None = None,
    environ: Mapping[str, str] | None = None,
) -> ChannelSecurity:
    """Resolves a client's channel security from options, then ``AGENTRT_*`` variables.

    TLS is on when ``tls`` is true or any of ``ca_file``, ``cert_file``, ``key_file`` is set;
    without ``ca_file`` the server is verified against the system's roots.

    Args:
        target: Where the client connects (``host:port`` or a gRPC target URI).
        ca_file: PEM CA to verify the server with (``AGENTRT_CA``).
        cert_file: PEM client certificate, for mTLS (``AGENTRT_CERT``).
        key_file: Its PEM private key (``AGENTRT_KEY``).
        token: Bearer token (``AGENTRT_TOKEN``).
        token_file: File whose first line is the bearer token (``AGENTRT_TOKEN_FILE``).
        server_name: Name to check the server's certificate against (``AGENTRT_SERVER_NAME``).
        tls: Force TLS on or off (``AGENTRT_TLS``); None: on when a TLS file is given.
        environ: The environment to read; ``os.environ`` when None.

    Returns:
        The resolved settings, files read.

    Raises:
        CredentialsError: A file cannot be used, options conflict, or a token would be sent in
            clear to a non-loopback target.
    """
    env = os.environ if environ is None else environ
    ca = _pick(ca_file, env, ENV_CA)
    cert = _pick(cert_file, env, ENV_CERT)
    key = _pick(key_file, env, ENV_KEY)
    name = _pick(server_name, env, ENV_SERVER_NAME)
    use_tls = tls if tls is not None else _env_tls(env)
    if bool(cert) != bool(key):
        given, missing = ("client certificate", "key") if cert else ("client key", "certificate")
        raise CredentialsError(
            f"a {given} needs its {missing} too: give both --cert and --key "
            f"({ENV_CERT} and {ENV_KEY}), or neither"
        )
    if use_tls is None:
        use_tls = bool(ca or cert)
    elif not use_tls and (ca or cert):
        raise CredentialsError("TLS is turned off but a CA or client certificate is given")
    if name and not use_tls:
        raise CredentialsError("a TLS server name is given but the connection is plaintext: give a CA")
    bearer = _token(token, token_file, env)
    if bearer and not use_tls and not is_loopback_target(target):
        raise CredentialsError(
            f"refusing to send a token in clear to {target}: use TLS (--ca / {ENV_CA}), "
            "or connect to a loopback address"
        )
    return ChannelSecurity(
        target=target,
        tls=use_tls,
        root_certificates=_read_pem(ca, "CA") if ca else None,
        certificate_chain=_read_pem(cert, "client certificate") if cert else None,
        private_key=_read_pem(key, "client key") if key else None,
        server_name=name,
        token=bearer,
    )


def _pick(value: str | None, env: Mapping[str, str], name: str) -> str:
    return value if value is not None else env.get(name, "")


def _env_tls(env: Mapping[str, str]) -> bool | None:
    raw = env.get(ENV_TLS, "").strip().lower()
    if not raw:
        return None  # unset: TLS follows the files given
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise CredentialsError(f"{ENV_TLS} must be 1/true/yes/on or 0/false/no/off, not {raw!r}")


def _token(token: str | None, token_file: str | None, env: Mapping[str, str]) -> str:
    # Options win over the environment; at one level, both a token and a file is ambiguous.
    if token is not None or token_file is not None:
        value, path, source = token or "", token_file or "", "token and token_file"
    else:
        value, path, source = (
            env.get(ENV_TOKEN, ""),
            env.get(ENV_TOKEN_FILE, ""),
            f"{ENV_TOKEN} and {ENV_TOKEN_FILE}",
        )
    if value and path:
        raise CredentialsError(f"give one of {source}, not both")
    if path:
        return read_token_file(path)
    return _check_token(value.strip(), "the token") if value.strip() else ""


def read_token_file(path: str) -> str:
    """Returns the token on the first line of ``path``, stripped of surrounding whitespace.

    Raises:
        CredentialsError: The file cannot be read, or its first line holds no usable token.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            first = fh.readline().strip()
    except OSError as exc:
        raise CredentialsError(f"cannot read token file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise CredentialsError(f"token file {path} is not UTF-8 text") from None
    if not first:
        raise CredentialsError(f"token file {path} has no token on its first line")
    return _check_token(first, f"the token in {path}")


def _check_token(token: str, what: str) -> str:
    # A header value must be visible ASCII; say so without echoing the secret.
    if not all("\x21" <= ch <= "\x7e" for ch in token):
        raise CredentialsError(f"{what} has characters not allowed in a header (visible ASCII only)")
    return token


def _read_pem(path: str, what: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise CredentialsError(f"cannot read {what} file {path}: {exc.strerror}") from None
    if b"-----BEGIN" not in data:
        raise CredentialsError(f"{what} file {path} is not PEM")
    return data


def is_loopback_target(target: str) -> bool:
    """True when every address ``target`` names is on this machine: loopback IPs, ``localhost``, unix sockets.

    Accepts ``host:port``, ``[v6]:port`` and the gRPC URI forms ``dns:[//auth/]host:port``,
    ``ipv4:a:p,b:p``, ``ipv6:[a]:p``, ``unix:path`` and ``unix-abstract:name``. Any other
    scheme counts as remote.
    """
    if target.startswith(("unix:", "unix-abstract:")):
        return True
    rest = target
    if rest.startswith("dns:"):
        rest = rest.removeprefix("dns:")
        if rest.startswith("//"):
            _, _, rest = rest[2:].partition("/")  # drop the DNS server authority
    elif rest.startswith(("ipv4:", "ipv6:")):
        addresses = rest.partition(":")[2].split(",")
        return all(_is_loopback_host(_host_of(a)) for a in addresses)
    elif "://" in rest:
        return False
    return _is_loopback_host(_host_of(rest))


def _host_of(address: str) -> str:
    if address.startswith("["):
        return address[1 : address.find("]")] if "]" in address else address[1:]
    if address.count(":") == 1:
        return address.partition(":")[0]
    return address  # no port, or a bare IPv6 address


def _is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
