"""``agentrt auth hash-token``: the [[tokens]] entry of a bearer token, and a generated token shown once."""

from __future__ import annotations

import hashlib
import io
import stat
import tomllib
from pathlib import Path
from typing import Any

import pytest

from agentrt.client import cli
from agentrt.client._tokens import ROLES, token_sha256, tokens_entry
from agentrt.server.config import ROLES as SERVER_ROLES

TOKEN = "tok_3xAmple-Value.1"


def hash_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *argv: str, stdin: str = ""
) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = cli.main(["auth", "hash-token", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def only_entry(out: str) -> dict[str, Any]:
    [entry] = tomllib.loads(out)["tokens"]
    assert isinstance(entry, dict)
    return entry


def test_the_hash_is_sha256_of_the_utf8_token() -> None:
    assert token_sha256(TOKEN) == hashlib.sha256(TOKEN.encode()).hexdigest()


def test_roles_are_the_servers() -> None:
    assert ROLES == SERVER_ROLES


def test_token_from_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = hash_token(monkeypatch, capsys, "--subject", "ci-bot", stdin=f"{TOKEN}\n")
    assert code == 0 and err == ""
    assert only_entry(out) == {
        "sha256": hashlib.sha256(TOKEN.encode()).hexdigest(),
        "subject": "ci-bot",
        "tenant": "default",
        "roles": ["runner"],
    }
    assert TOKEN not in out
    assert out.startswith("[[tokens]]\nsha256 = ")


def test_token_from_a_file_with_tenant_and_roles(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "alice.token"
    path.write_text(TOKEN + "\n")
    argv = ["--token-file", str(path), "--subject", 'alice "the approver"', "--tenant", "acme"]
    argv += ["--role", "approver", "--role", "operator", "--role", "approver"]
    code, out, _ = hash_token(monkeypatch, capsys, *argv)
    assert code == 0
    entry = only_entry(out)
    assert entry["sha256"] == hashlib.sha256(TOKEN.encode()).hexdigest()
    assert (entry["subject"], entry["tenant"], entry["roles"]) == (
        'alice "the approver"',
        "acme",
        ["approver", "operator"],
    )
    # The global --token-file (before `auth`) means the same.
    assert cli.main(["--token-file", str(path), "auth", "hash-token", "--subject", "a"]) == 0
    assert only_entry(capsys.readouterr().out)["sha256"] == entry["sha256"]


def test_any_subject_and_tenant_round_trip_through_toml() -> None:
    subject = 'émile 😀 "q" back\\slash\ttab\nnewline\x7fdel\x00nul'
    entry = tomllib.loads(tokens_entry(token=TOKEN, subject=subject, tenant="t\u00e9", roles=["runner"]))
    assert entry["tokens"][0]["subject"] == subject and entry["tokens"][0]["tenant"] == "té"


def test_generate_prints_the_token_once_on_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = hash_token(monkeypatch, capsys, "--generate", "--subject", "svc", "--role", "admin")
    assert code == 0
    token = err.strip().rpartition(": ")[2]
    assert len(token) >= 43 and token not in out  # 32 random bytes, url-safe base64
    entry = only_entry(out)
    assert entry["sha256"] == hashlib.sha256(token.encode()).hexdigest() and entry["roles"] == ["admin"]
    _, _, err2 = hash_token(monkeypatch, capsys, "--generate", "--subject", "svc")
    assert err2.strip().rpartition(": ")[2] != token


def test_generate_into_a_new_private_file(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "svc.token"
    code, out, err = hash_token(monkeypatch, capsys, "--generate", "--token-out", str(path), "--subject", "s")
    assert code == 0
    token = path.read_text().strip()
    assert token not in err and token not in out and f"token written to {path}" in err
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert only_entry(out)["sha256"] == hashlib.sha256(token.encode()).hexdigest()
    # Never overwritten: the token it holds may already be in use.
    code, out, err = hash_token(monkeypatch, capsys, "--generate", "--token-out", str(path), "--subject", "s")
    assert (code, out) == (2, "") and err == f"error: {path} exists; not overwriting a token file\n"
    assert path.read_text().strip() == token


@pytest.mark.parametrize(
    ("argv", "stdin", "message"),
    [
        (["--subject", "s"], "", "error: no token on stdin: pipe one in, or use --token-file or --generate"),
        (["--subject", "s"], "two words\n", "error: the token has characters not allowed in a header"),
        (["--subject", "s", "--generate", "--token-file", "f"], "", "error: give --generate or --token-file"),
        (["--subject", "s", "--token-out", "f"], TOKEN, "error: --token-out writes a generated token"),
        (["--subject", "s", "--token-file", "/nonexistent/t"], "", "error: cannot read token file"),
    ],
)
def test_refusals(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    stdin: str,
    message: str,
) -> None:
    code, out, err = hash_token(monkeypatch, capsys, *argv, stdin=stdin)
    assert (code, out) == (2, "") and err.startswith(message)


def test_token_flag_and_usage_errors(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(TOKEN))
    # On the command line a token shows in the process list: hash-token does not take one.
    assert cli.main(["--token", TOKEN, "auth", "hash-token", "--subject", "s"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "not --token" in captured.err and TOKEN not in captured.err
    assert cli.main(["auth", "hash-token"]) == 2  # --subject is required
    assert cli.main(["auth", "hash-token", "--subject", "s", "--role", "root"]) == 2
    assert cli.main(["auth"]) == 2
    assert "invalid choice: 'root'" in capsys.readouterr().err
