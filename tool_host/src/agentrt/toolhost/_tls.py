"""TLS material for both servers and their clients: rotation-aware server credentials, client
credentials, reading a verified peer certificate, and a throwaway PKI for local processes.

Server credentials are gRPC's dynamic credentials: on each new handshake gRPC asks for the
current configuration, and the files are re-read when their modification time or size changed.
A pair that does not match yet (the certificate replaced before its key, say) is not taken:
the previous pair keeps serving until both files agree.
"""

from __future__ import annotations

import dataclasses
import datetime
import errno
import ipaddress
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import cast

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "DevPki",
    "PeerCertificate",
    "ReloadingServerCredentials",
    "TlsFileError",
    "channel_credentials",
    "dev_pki_paths",
    "generate_dev_pki",
    "is_loopback_host",
    "issue_certificate",
    "peer_certificate",
]

_log = logging.getLogger(__name__)


class TlsFileError(Exception):
    """A certificate, key or CA file cannot be read or does not parse; the message names the file."""


def _read(path: str | Path, what: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise TlsFileError(f"cannot read {what} {path}: {exc.strerror}") from None
    if b"-----BEGIN" not in data:
        raise TlsFileError(f"{what} {path} is not PEM")
    return data


def _stamp(paths: Iterable[str]) -> tuple[tuple[int, int], ...]:
    stamps = []
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            stamps.append((-1, -1))
            continue
        stamps.append((info.st_mtime_ns, info.st_size))
    return tuple(stamps)


def _pair_matches(cert_pem: bytes, key_pem: bytes) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except ValueError:
        return False
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    return cert.public_key().public_bytes(der, spki) == key.public_key().public_bytes(der, spki)


class ReloadingServerCredentials:
    """Server credentials from PEM files, re-read when the files change (no restart).

    Make one per server: gRPC binds the fetcher to the first port that uses it.

    Args:
        cert_file: Certificate chain the server presents.
        key_file: Its private key.
        client_ca_file: When given, clients must present a certificate that chains to it (mTLS).

    Raises:
        TlsFileError: A file is missing or not PEM, or the certificate and key do not match.
    """

    def __init__(self, *, cert_file: str, key_file: str, client_ca_file: str = "") -> None:
        self._files = [cert_file, key_file] + ([client_ca_file] if client_ca_file else [])
        self._require_client = bool(client_ca_file)
        self._lock = threading.Lock()  # the fetcher runs on gRPC's threads
        self.reloads = 0
        config, self._stamp = self._load()
        if config is None:
            raise TlsFileError(f"certificate {cert_file} does not match the key {key_file}")
        # The stubs say the fetcher must return a configuration; gRPC takes None as "unchanged".
        fetch = cast(Callable[[], grpc.ServerCertificateConfiguration], self._fetch)
        self.credentials = grpc.dynamic_ssl_server_credentials(
            config, fetch, require_client_authentication=self._require_client
        )

    def _load(self) -> tuple[grpc.ServerCertificateConfiguration | None, tuple[tuple[int, int], ...]]:
        stamp = _stamp(self._files)
        cert = _read(self._files[0], "certificate")
        key = _read(self._files[1], "private key")
        ca = _read(self._files[2], "client CA") if self._require_client else None
        if not _pair_matches(cert, key):
            return None, stamp
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca), stamp

    def _fetch(self) -> grpc.ServerCertificateConfiguration | None:
        # Called by gRPC before each handshake; None keeps the current configuration.
        with self._lock:
            if _stamp(self._files) == self._stamp:
                return None
            try:
                config, stamp = self._load()
            except TlsFileError as exc:
                _log.warning("TLS files changed but cannot be used yet: %s", exc)
                return None
            if config is None:
                return None  # mid-rotation: certificate and key disagree; keep serving the old pair
            self._stamp = stamp
            self.reloads += 1
            _log.info("TLS certificate reloaded from %s", self._files[0])
            return config


def channel_credentials(*, ca_file: str, cert_file: str = "", key_file: str = "") -> grpc.ChannelCredentials:
    """Client credentials: verify the server against ``ca_file``; present a client certificate if given.

    Raises:
        TlsFileError: A file is missing or not PEM.
    """
    ca = _read(ca_file, "CA")
    cert = _read(cert_file, "client certificate") if cert_file else None
    key = _read(key_file, "client key") if key_file else None
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PeerCertificate:
    """The verified client certificate of a call: names an mTLS mapping can match.

    ``names`` holds ``CN=<common name>``, ``DNS:<name>``, ``URI:<uri>`` and ``IP:<address>``.
    """

    names: tuple[str, ...]


def peer_certificate(auth_context: Mapping[str, Sequence[bytes]]) -> PeerCertificate | None:
    """The peer's certificate names from a gRPC auth context; None without a verified certificate."""
    pem = auth_context.get("x509_pem_cert")
    if not pem:
        return None
    try:
        cert = x509.load_pem_x509_certificate(pem[0])
    except ValueError:
        return None
    names = [
        f"CN={a.value if isinstance(a.value, str) else a.value.decode(errors='replace')}"
        for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    ]
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        san = None
    if san is not None:
        names += [f"DNS:{n}" for n in san.get_values_for_type(x509.DNSName)]
        names += [f"URI:{n}" for n in san.get_values_for_type(x509.UniformResourceIdentifier)]
        names += [f"IP:{n}" for n in san.get_values_for_type(x509.IPAddress)]
    return PeerCertificate(names=tuple(str(n) for n in names))


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (``127.0.0.0/8``, ``::1``), brackets allowed."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclasses.dataclass(frozen=True, kw_only=True)
class DevPki:
    """Files of a throwaway PKI: one CA, one server certificate, one client certificate per name."""

    directory: Path
    ca_file: Path
    ca_key_file: Path
    server_cert_file: Path
    server_key_file: Path
    client_files: Mapping[str, tuple[Path, Path]]  # client name -> (certificate, key)

    def files(self) -> list[Path]:
        """Every file of the PKI."""
        pairs = [path for pair in self.client_files.values() for path in pair]
        return [self.ca_file, self.ca_key_file, self.server_cert_file, self.server_key_file, *pairs]


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write(path: Path, data: bytes) -> None:
    # Created private (0600) before any byte is written; O_EXCL: a planted name (a symlink, say)
    # is never followed.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def issue_certificate(
    *,
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    common_name: str,
    hosts: Sequence[str] = (),
    uris: Sequence[str] = (),
    client: bool = False,
    days: int = 30,
    key: ec.EllipticCurvePrivateKey | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A leaf certificate signed by ``ca_key``: a server one with ``hosts`` as SANs, or a client one."""
    key = key or _key()
    now = datetime.datetime.now(datetime.UTC)
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    sans += [x509.UniformResourceIdentifier(u) for u in uris]
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def dev_pki_paths(directory: Path, *, clients: Sequence[str] = ("agentrt-runtime",)) -> DevPki:
    """The files :func:`generate_dev_pki` writes in ``directory`` (nothing is read or written).

    Raises:
        ValueError: A client name is not a plain file name, or names a file of the PKI twice.
    """
    bad = [name for name in clients if not _PLAIN_NAME.fullmatch(name)]
    if bad:
        raise ValueError(f"client names must be plain file names (letters, digits, '._-'): {bad}")
    paths = DevPki(
        directory=directory,
        ca_file=directory / "ca.pem",
        ca_key_file=directory / "ca.key",
        server_cert_file=directory / "server.pem",
        server_key_file=directory / "server.key",
        client_files={name: (directory / f"{name}.pem", directory / f"{name}.key") for name in clients},
    )
    files = paths.files()
    if len(set(files)) != len(files):
        raise ValueError(f"client names {list(clients)} repeat or collide with ca or server")
    return paths


def generate_dev_pki(
    directory: Path,
    *,
    hosts: Sequence[str] = ("127.0.0.1", "localhost"),
    clients: Sequence[str] = ("agentrt-runtime",),
    days: int = 30,
    overwrite: bool = False,
) -> DevPki:
    """Make a CA, a server certificate for ``hosts`` and a client certificate per name in ``clients``.

    For local processes (a tool host the runtime spawns), development (``agentrt auth dev-pki``)
    and tests. Every file is written 0600, the directory (when made here) 0700. Existing files
    are replaced only with ``overwrite``; otherwise nothing is written.

    Raises:
        FileExistsError: A file of the PKI exists and ``overwrite`` is false.
        ValueError: A client name is not a plain file name, or names a file of the PKI twice.
    """
    pem = serialization.Encoding.PEM
    paths = dev_pki_paths(directory, clients=clients)
    files = paths.files()
    existing = [str(f) for f in files if os.path.lexists(f)]
    if existing and not overwrite:
        raise FileExistsError(errno.EEXIST, f"the PKI would overwrite {', '.join(existing)}")
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    for name in existing:
        os.unlink(name)
    ca_key = _key()
    now = datetime.datetime.now(datetime.UTC)
    # A name of its own: a peer trusting two of these CAs tells them apart by name and key id.
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"agentrt local CA {os.urandom(4).hex()}")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write(paths.ca_key_file, _key_pem(ca_key))
    _write(paths.ca_file, ca_cert.public_bytes(pem))
    cert, key = issue_certificate(
        ca_cert=ca_cert, ca_key=ca_key, common_name=hosts[0] if hosts else "server", hosts=hosts, days=days
    )
    _write(paths.server_key_file, _key_pem(key))
    _write(paths.server_cert_file, cert.public_bytes(pem))
    for name, (cert_path, key_path) in paths.client_files.items():
        cert, key = issue_certificate(
            ca_cert=ca_cert, ca_key=ca_key, common_name=name, client=True, days=days
        )
        _write(key_path, _key_pem(key))
        _write(cert_path, cert.public_bytes(pem))
    return paths
