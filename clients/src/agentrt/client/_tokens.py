"""``agentrt auth hash-token``: the entry of a static bearer token for the server's tokens file.

The server stores only ``sha256(token)``; the token itself goes to the client. A generated
token is shown once (or written to a new 0600 file) and kept nowhere else.
"""

from __future__ import annotations

import getpass
import hashlib
import os
import secrets
import sys
from collections.abc import Sequence
from typing import Final, TextIO

from agentrt.client._credentials import read_token_file
from agentrt.client._errors import CredentialsError

ROLES: Final = ("runner", "approver", "operator", "admin")
"""The roles a server knows (agentrt.server's ``ROLES``; a test keeps them equal)."""

DEFAULT_TENANT: Final = "default"
GENERATED_TOKEN_BYTES: Final = 32


def token_sha256(token: str) -> str:
    """The hash the server's tokens file stores: ``hashlib.sha256(token.encode()).hexdigest()``."""
    return hashlib.sha256(token.encode()).hexdigest()


def tokens_entry(*, token: str, subject: str, tenant: str, roles: Sequence[str]) -> str:
    """One ``[[tokens]]`` table of the server's tokens file, in TOML, ending with a newline."""
    return (
        "[[tokens]]\n"
        f"sha256 = {_toml_string(token_sha256(token))}\n"
        f"subject = {_toml_string(subject)}\n"
        f"tenant = {_toml_string(tenant)}\n"
        f"roles = [{', '.join(_toml_string(r) for r in roles)}]\n"
    )


def _toml_string(text: str) -> str:
    # A TOML basic string: escape the quote, the backslash and control characters (DEL too).
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch < " " or ch == "\x7f":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def read_token(*, token_file: str | None, stdin: TextIO) -> str:
    """The token to hash: the first line of ``token_file``, else of stdin (not echoed on a terminal).

    Raises:
        CredentialsError: No usable token was given.
    """
    if token_file:
        return read_token_file(token_file)
    line = getpass.getpass("token: ") if stdin.isatty() else stdin.readline()
    token = line.strip()
    if not token:
        raise CredentialsError("no token on stdin: pipe one in, or use --token-file or --generate")
    if not all("\x21" <= ch <= "\x7e" for ch in token):
        raise CredentialsError("the token has characters not allowed in a header (visible ASCII only)")
    return token


def write_new_token_file(path: str, token: str) -> None:
    """Writes ``token`` to a new file readable only by its owner.

    Raises:
        CredentialsError: The file exists or cannot be created.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise CredentialsError(f"{path} exists; not overwriting a token file") from None
    except OSError as exc:
        raise CredentialsError(f"cannot create {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(token + "\n")


def hash_token_command(
    *,
    generate: bool,
    token_file: str | None,
    token_out: str | None,
    subject: str,
    tenant: str,
    roles: Sequence[str],
) -> int:
    """Runs ``agentrt auth hash-token``: prints the TOML entry on stdout.

    A generated token goes to ``token_out`` when given, else to stderr, so stdout can be
    appended to the tokens file as it is.

    Raises:
        CredentialsError: Conflicting options or no usable token.
    """
    if generate and token_file:
        raise CredentialsError("give --generate or --token-file, not both")
    if token_out and not generate:
        raise CredentialsError("--token-out writes a generated token: add --generate")
    if generate:
        token = secrets.token_urlsafe(GENERATED_TOKEN_BYTES)
        if token_out:
            write_new_token_file(token_out, token)
            print(f"token written to {token_out} (mode 0600)", file=sys.stderr)
        else:
            print(f"token (shown once, give it to the client): {token}", file=sys.stderr)
    else:
        token = read_token(token_file=token_file, stdin=sys.stdin)
    unique_roles = list(dict.fromkeys(roles or ["runner"]))
    sys.stdout.write(tokens_entry(token=token, subject=subject, tenant=tenant, roles=unique_roles))
    return 0
