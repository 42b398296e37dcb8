"""Static bearer tokens: the hashed tokens file, its validation, and rotation without a restart."""

from __future__ import annotations

import hashlib
import logging
import os
import time
from pathlib import Path

import pytest

from agentrt.server.auth import AuthRequest, StaticTokens, build_authentication, hash_token, parse_tokens
from agentrt.server.config import AuthConfig
from agentrt.server.core import NotAuthenticated

ALICE = "alice-secret-token-0123456789"
BOB = "bob-secret-token-9876543210"


def entry(token: str, *, subject: str, tenant: str = "acme", roles: str = '["runner"]') -> str:
    return (
        f'[[tokens]]\nsha256 = "{hash_token(token)}"\nsubject = "{subject}"\n'
        f'tenant = "{tenant}"\nroles = {roles}\n'
    )


def replace(path: Path, text: str) -> None:
    # Atomic replace, as an operator's tooling should rotate the file.
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def bearer(token: str) -> AuthRequest:
    return AuthRequest(method="/m", metadata={"authorization": f"Bearer {token}"}, peer=None)


def test_hash_token_is_the_hex_sha256_of_the_utf8_token() -> None:
    assert hash_token("tökén") == hashlib.sha256("tökén".encode()).hexdigest()
    assert len(hash_token("x")) == 64


def test_a_token_maps_to_its_principal_and_an_unknown_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text(
        entry(ALICE, subject="alice", roles='["approver", "runner"]')
        + entry(BOB, subject="bob", tenant="zeta")
    )
    tokens = StaticTokens(path=path)
    alice = tokens.authenticate_token(ALICE)
    assert (alice.subject, alice.tenant, alice.roles) == ("alice", "acme", frozenset({"approver", "runner"}))
    assert alice.authenticated_by == "token"
    assert tokens.authenticate_token(BOB).tenant == "zeta"
    with pytest.raises(NotAuthenticated) as refused:
        tokens.authenticate_token("not-a-token")
    assert refused.value.reason == "TOKEN_UNKNOWN" and "not-a-token" not in refused.value.message
    # The hash is compared, never the token: an entry's hash presented as a token is unknown.
    with pytest.raises(NotAuthenticated):
        tokens.authenticate_token(hash_token(ALICE))


def test_upper_case_hashes_and_an_empty_file_are_accepted() -> None:
    upper = entry(ALICE, subject="alice").replace(hash_token(ALICE), hash_token(ALICE).upper())
    assert set(parse_tokens(upper.encode())) == {hash_token(ALICE)}
    assert parse_tokens(b"") == {}
    assert parse_tokens(b"tokens = []") == {}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[[tokens]\n", "not valid TOML"),
        (b"\xff\xfe", "not UTF-8"),
        ('[[token]]\nsha256 = "x"\n', "token: Extra inputs are not permitted"),
        (entry(ALICE, subject="alice").replace(hash_token(ALICE), ALICE), "entry 1 field sha256"),
        (entry(ALICE, subject="alice", roles='["root"]'), "entry 1 field roles.0"),
        (entry(ALICE, subject="alice", roles="[]"), "entry 1 field roles"),
        (entry(ALICE, subject=""), "entry 1 field subject"),
        (entry(ALICE, subject="x" * 129), "entry 1 field subject"),
        (entry(ALICE, subject="a\\u0007b"), "entry 1 field subject: Value error, must be printable"),
        (entry(ALICE, subject=" alice"), "entry 1 field subject"),
        (entry(BOB, subject="bob") + entry(ALICE, subject="alice", tenant="t" * 200), "entry 2 field tenant"),
        (
            entry(ALICE, subject="alice") + entry(ALICE, subject="eve"),
            "entry 2: the same token hash as entry 1",
        ),
        (entry(ALICE, subject="alice") + "admin = true\n", "entry 1 field admin"),
    ],
)
def test_a_bad_file_names_the_file_and_entry_and_never_a_token(
    tmp_path: Path, text: str | bytes, expected: str
) -> None:
    path = tmp_path / "tokens.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(ValueError) as failed:
        StaticTokens(path=path)
    message = str(failed.value)
    assert message.startswith(f"tokens file {path}: ") and expected in message, message
    assert ALICE not in message and BOB not in message
    assert hash_token(ALICE) not in message and hash_token(BOB) not in message


def test_a_missing_file_is_a_value_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"cannot read tokens file .*missing\.toml"):
        StaticTokens(path=tmp_path / "missing.toml")


def test_tokens_are_added_and_revoked_without_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text(entry(ALICE, subject="alice"))
    now = [0.0]
    tokens = StaticTokens(path=path, clock=lambda: now[0])
    assert tokens.authenticate_token(ALICE).subject == "alice"

    replace(path, entry(BOB, subject="bob"))  # alice revoked, bob added
    # Within the check interval the file is not looked at (one stat a second at most).
    assert tokens.authenticate_token(ALICE).subject == "alice"
    now[0] = 1.0
    assert tokens.authenticate_token(BOB).subject == "bob"
    with pytest.raises(NotAuthenticated) as refused:
        tokens.authenticate_token(ALICE)
    assert refused.value.reason == "TOKEN_UNKNOWN"


def test_a_broken_rewrite_keeps_the_last_good_table_and_warns_without_secrets(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text(entry(ALICE, subject="alice"))
    now = [0.0]
    tokens = StaticTokens(path=path, clock=lambda: now[0])
    caplog.set_level(logging.DEBUG)

    # Half-written: the raw token pasted where its hash belongs.
    replace(path, entry(ALICE, subject="alice").replace(hash_token(ALICE), ALICE) + entry(BOB, subject="bob"))
    now[0] = 1.0
    assert tokens.authenticate_token(ALICE).subject == "alice"
    with pytest.raises(NotAuthenticated):
        tokens.authenticate_token(BOB)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(path) in warnings[0].getMessage()
    assert "entry 1 field sha256" in warnings[0].getMessage()
    now[0] = 2.0
    tokens.authenticate_token(ALICE)  # the same broken file is not re-read or re-reported
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1

    path.unlink()  # deleted: still the last good table
    now[0] = 3.0
    assert tokens.authenticate_token(ALICE).subject == "alice"

    replace(path, entry(BOB, subject="bob"))
    now[0] = 4.0
    assert tokens.authenticate_token(BOB).subject == "bob"
    logged = caplog.text
    for secret in (ALICE, BOB):
        assert secret not in logged


def test_rotation_through_the_built_chain_takes_effect_within_a_second_or_two(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text(entry(ALICE, subject="alice"))
    authentication = build_authentication(AuthConfig(tokens_file=str(path)), local=None)
    assert authentication.authenticate(bearer(ALICE)).subject == "alice"
    replace(path, entry(BOB, subject="bob"))
    deadline = time.monotonic() + 5.0
    while True:  # the real one-second check interval: poll with a bound
        try:
            principal = authentication.authenticate(bearer(BOB))
            break
        except NotAuthenticated:
            assert time.monotonic() < deadline, "the new token was never accepted"
            time.sleep(0.05)
    assert principal.subject == "bob"
    with pytest.raises(NotAuthenticated):
        authentication.authenticate(bearer(ALICE))
