"""The files and variables ``[redis]`` names: the ACL password and the TLS material.

Read at start, before anything connects, so a bad path is a clear startup error. Messages name
the file or variable, never its content. This module does not import redis-py.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping

from agentrt.server.config import RedisConfig

__all__ = ["RedisSetupError", "check_tls_files", "read_password"]


class RedisSetupError(Exception):
    """The ``[redis]`` section cannot be used (the message names files and variables, never a secret)."""


def read_password(config: RedisConfig, env: Mapping[str, str] | None = None) -> str | None:
    """The ACL password from ``password_file`` or ``password_env``; None when neither is set.

    Raises:
        RedisSetupError: the file cannot be read or is empty, or the variable is unset or empty.
    """
    if config.password_file:
        try:
            with open(config.password_file, encoding="utf-8") as fh:
                secret = fh.read().rstrip("\r\n")
        except OSError as exc:
            raise RedisSetupError(
                f"cannot read password_file {config.password_file}: {exc.strerror}"
            ) from None
        except UnicodeDecodeError:
            raise RedisSetupError(f"password_file {config.password_file} is not UTF-8 text") from None
        if not secret:
            raise RedisSetupError(f"password_file {config.password_file} is empty")
        return secret
    if config.password_env:
        secret = (os.environ if env is None else env).get(config.password_env, "")
        if not secret:
            raise RedisSetupError(f"password_env {config.password_env} is not set or empty")
        return secret
    return None


def check_tls_files(config: RedisConfig) -> ssl.SSLContext | None:
    """The TLS context ``rediss://`` uses, built from the configured files (None without TLS).

    Built at start so a missing or unreadable file is a clear startup error rather than a link
    that never comes up; redis-py is handed the same files.

    Raises:
        RedisSetupError: a CA, certificate or key file that cannot be loaded.
    """
    if not config.tls:
        return None
    try:
        context = ssl.create_default_context(cafile=config.ca_file or None)
    except OSError as exc:
        raise RedisSetupError(f"cannot load ca_file {config.ca_file}: {_reason(exc)}") from None
    if config.cert_file:
        try:
            context.load_cert_chain(config.cert_file, config.key_file)
        except OSError as exc:
            raise RedisSetupError(
                f"cannot load cert_file {config.cert_file} with key_file {config.key_file}: {_reason(exc)}"
            ) from None
    return context


def _reason(exc: OSError) -> str:
    # ssl.SSLError is an OSError whose strerror is often None: its class and reason say enough.
    if isinstance(exc, ssl.SSLError):
        return exc.reason or exc.__class__.__name__
    return exc.strerror or exc.__class__.__name__
