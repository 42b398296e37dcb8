"""``agentrt auth dev-pki DIR``: the files it writes, their modes; it replaces nothing unless asked."""

from __future__ import annotations

import ipaddress
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from agentrt.client import cli
from agentrt.toolhost.security import GrantSigner, GrantVerifier

FILES = {
    "agentrt-runtime.key",
    "agentrt-runtime.pem",
    "alice.key",
    "alice.pem",
    "ca.key",
    "ca.pem",
    "grant.key",
    "grant.pub",
    "server.key",
    "server.pem",
}


def dev_pki(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["auth", "dev-pki", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def contents(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def test_it_writes_a_ca_certificates_and_a_grant_key_pair_all_0600(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "pki"
    code, out, err = dev_pki(capsys, str(directory), "--client", "alice", "--json")
    assert (code, err) == (0, "")
    listing: dict[str, Any] = json.loads(out)
    assert {p.name for p in directory.iterdir()} == FILES
    assert {p.stat().st_mode & 0o777 for p in directory.iterdir()} == {0o600}
    assert directory.stat().st_mode & 0o777 == 0o700
    assert listing["clients"]["alice"] == {
        "cert_file": str(directory / "alice.pem"),
        "key_file": str(directory / "alice.key"),
    }
    server = x509.load_pem_x509_certificate(Path(listing["server_cert_file"]).read_bytes())
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    ca = x509.load_pem_x509_certificate(Path(listing["ca_file"]).read_bytes())
    alice = x509.load_pem_x509_certificate(Path(listing["clients"]["alice"]["cert_file"]).read_bytes())
    assert alice.subject.rfc4514_string() == "CN=alice"
    alice.verify_directly_issued_by(ca)
    key = serialization.load_pem_private_key(Path(listing["clients"]["alice"]["key_file"]).read_bytes(), None)
    assert key.public_key() == alice.public_key()
    # The grant pair is a pair: the host's --grant-keys verifies what the runtime's key signs.
    grant = GrantSigner(key_file=listing["grant_key_file"]).sign(
        tenant="t",
        run_id="r",
        call_id="c",
        idempotency_key="k",
        fencing_token=1,
        tool="x",
        arguments_json="{}",
    )
    assert GrantVerifier(keys_file=listing["grant_public_key_file"]).verify(grant).run_id == "r"


def test_it_says_what_each_file_is_for(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / "pki"
    code, out, _ = dev_pki(capsys, str(directory), "--host", "tools.internal", "--host", "10.0.0.5")
    assert code == 0
    for name in FILES - {"alice.key", "alice.pem"}:
        assert str(directory / name) in out
    assert "server certificate for tools.internal, 10.0.0.5" in out
    assert "signing_key_file" in out and "--grant-keys" in out


def test_it_replaces_nothing_unless_forced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / "pki"
    assert dev_pki(capsys, str(directory))[0] == 0
    before = contents(directory)
    code, out, err = dev_pki(capsys, str(directory))
    assert (code, out) == (2, "")
    assert f"would overwrite {directory / 'ca.pem'}" in err and "--force" in err
    assert contents(directory) == before
    # One file in the way is enough; a new client's files are not written either.
    for name in set(before) - {"grant.pub"}:
        (directory / name).unlink()
    code, _, err = dev_pki(capsys, str(directory), "--client", "bob")
    assert code == 2 and str(directory / "grant.pub") in err
    assert {p.name for p in directory.iterdir()} == {"grant.pub"}
    code, _, err = dev_pki(capsys, str(directory), "--force")
    assert (code, err) == (0, "")
    after = contents(directory)
    assert set(after) == set(before) and after["grant.pub"] != before["grant.pub"]
    assert {p.stat().st_mode & 0o777 for p in directory.iterdir()} == {0o600}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--client", "../escape"], "client names must be plain file names"),
        (["--client", "server"], "collide with ca or server"),
        (["--days", "0"], "--days: must be 1 to 3650"),
        (["--days", "100000"], "--days: must be 1 to 3650"),
    ],
)
def test_unusable_options_exit_2_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = dev_pki(capsys, str(tmp_path / "pki"), *argv)
    assert (code, out) == (2, "")
    assert message in err
    assert not (tmp_path / "pki").exists() and not (tmp_path / "escape.pem").exists()


def test_without_the_tool_host_distribution_it_says_what_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The client installs without agentrt-toolhost; None in sys.modules makes its import fail.
    monkeypatch.setitem(sys.modules, "agentrt.toolhost", None)
    code, _, err = dev_pki(capsys, str(tmp_path / "pki"))
    assert code == 2 and "pip install agentrt-toolhost" in err
    assert not (tmp_path / "pki").exists()
