"""The shared ledger's flags: a bad URL, schema or TTL exits 2 with a message, no password, no files."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrt.toolhost import main


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--ledger-url", "sqlite:///tmp/x?password=pw-Zq9"], "must be postgresql://"),
        (["--ledger-url", "postgresql:pw-Zq9"], "must be postgresql://"),
        (["--ledger-url", "postgresql://u:pw-Zq9@h/db", "--ledger-schema", "a-b"], "invalid ledger schema"),
        (["--ledger-url", "postgresql://u:pw-Zq9@h/db", "--ledger-owner-ttl-s", "-1"], "positive"),
    ],
)
def test_bad_ledger_flags_exit_2_without_the_password(
    flags: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    code = main([*flags, "--data-dir", str(data), "--no-entrypoints"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert expected in err and "pw-Zq9" not in err
    assert not data.exists()


def test_the_ledger_url_comes_from_the_environment_when_not_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTRT_TOOLHOST_LEDGER_URL", "redis://u:pw-Zq9@h/0")
    code = main(["--data-dir", str(tmp_path / "data"), "--no-entrypoints"])
    _, err = capsys.readouterr()
    assert code == 2 and "its scheme is 'redis'" in err and "pw-Zq9" not in err


def test_help_names_the_shared_ledger_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out, _ = capsys.readouterr()
    for flag in ("--ledger-url", "--ledger-schema", "--ledger-owner-ttl-s", "AGENTRT_TOOLHOST_LEDGER_URL"):
        assert flag in out
