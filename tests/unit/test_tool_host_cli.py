"""Unit tests of ``agentrt.toolhost.main``: bad input exits 2 with a message and writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

import agentrt.plugins as plugins
from agentrt.toolhost import main
from agentrt.toolhost._host import parse_listen

EXAMPLE_FILE = Path(plugins.__file__).parent / "example_plugin_file.py"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("listen", "expected"),
    [("127.0.0.1:50051", ("127.0.0.1", 50051)), ("[::1]:0", ("[::1]", 0)), ("localhost:0", ("localhost", 0))],
)
def test_parse_listen(listen: str, expected: tuple[str, int]) -> None:
    assert parse_listen(listen) == expected


@pytest.mark.parametrize(
    "listen", ["nohost", ":50051", "host:", "host:port", "host:70000", "::1:0", "[::1:0"]
)
def test_bad_listen_addresses_exit_2(listen: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    code, out, err = _run(["--listen", listen, "--data-dir", str(data), "--no-entrypoints"], capsys)
    assert code == 2
    assert out == ""
    assert "invalid --listen" in err
    assert not data.exists()


def test_an_unbindable_address_exits_2_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    # 192.0.2.1 (TEST-NET-1) is never a local address, so binding it fails (--insecure: past the
    # refusal of a public address without mTLS and grants).
    code, out, err = _run(
        ["--listen", "192.0.2.1:0", "--data-dir", str(data), "--no-entrypoints", "--insecure"], capsys
    )
    assert code == 2
    assert out == ""
    assert "cannot listen on 192.0.2.1:0" in err
    assert not data.exists()


def test_a_plugin_that_fails_to_import_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    code, out, err = _run(
        ["--plugin", "no_such_plugin_mod", "--data-dir", str(data), "--no-entrypoints"], capsys
    )
    assert code == 2
    assert out == ""
    assert "cannot import plugin 'no_such_plugin_mod'" in err
    assert not data.exists()


def test_duplicate_tools_exit_2_naming_both_plugins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clone = tmp_path / "clone.py"
    clone.write_text(EXAMPLE_FILE.read_text())
    data = tmp_path / "data"
    argv = [
        "--plugin",
        str(EXAMPLE_FILE),
        "--plugin",
        str(clone),
        "--data-dir",
        str(data),
        "--no-entrypoints",
    ]
    code, out, err = _run(argv, capsys)
    assert code == 2
    assert out == ""
    assert "'text.upper'" in err and str(EXAMPLE_FILE) in err and str(clone) in err
    assert not data.exists()


@pytest.mark.parametrize("item", ["novalue", "=v"])
def test_bad_set_options_exit_2(item: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(["--set", item, "--no-entrypoints"], capsys)
    assert (code, out) == (2, "")
    assert "expected KEY=VALUE" in err


def test_negative_grace_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(["--grace", "-1", "--no-entrypoints"], capsys)
    assert code == 2 and "must not be negative" in err


def test_unknown_flags_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(["--bogus"], capsys)
    assert (code, out) == (2, "")
    assert "unrecognized arguments: --bogus" in err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["--help"], capsys)
    assert code == 0
    assert "--plugin MODULE_OR_FILE" in out


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--tls-cert", "c.pem"], "give --tls-cert, --tls-key and --client-ca together"),
        (
            ["--tls-cert", "c.pem", "--tls-key", "k.pem"],
            "give --tls-cert, --tls-key and --client-ca together",
        ),
        (["--client-ca", "ca.pem"], "give --tls-cert, --tls-key and --client-ca together"),
        (["--tls-cert", "c.pem", "--tls-key", "k.pem", "--client-ca", "ca.pem"], "cannot read certificate"),
        (["--grant-keys", "missing.pem"], "cannot read --grant-keys missing.pem"),
        (["--grant-leeway", "-1"], "--grant-leeway must not be negative"),
        (["--grant-max-lifetime", "0"], "--grant-max-lifetime must be a positive number of seconds"),
        (["--grant-max-lifetime", "-5"], "--grant-max-lifetime must be a positive number of seconds"),
        (["--grant-max-lifetime", "inf"], "--grant-max-lifetime must be a positive number of seconds"),
        (["--grant-max-lifetime", "nan"], "--grant-max-lifetime must be a positive number of seconds"),
        (["--encryption-key-file", "missing.json"], "--encryption-key-file: cannot read key file"),
        (["--listen", "10.1.2.3:0"], "refusing to listen on 10.1.2.3:0 without mTLS and call grants"),
    ],
)
def test_unusable_security_flags_exit_2_and_write_nothing(
    flags: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    code, out, err = _run(["--data-dir", str(data), "--no-entrypoints", *flags], capsys)
    assert (code, out) == (2, "")
    assert message in err
    assert not data.exists()


def test_grant_keys_that_are_not_ed25519_public_keys_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = tmp_path / "keys.pem"
    keys.write_text("not a key")
    code, _, err = _run(
        ["--data-dir", str(tmp_path / "d"), "--no-entrypoints", "--grant-keys", str(keys)], capsys
    )
    assert code == 2
    assert "no PEM public key found" in err
