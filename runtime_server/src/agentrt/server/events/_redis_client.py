"""The one way this runtime makes a redis-py client: its server, user, TLS and timeouts.

Two layers must not both own a concern, so redis-py neither retries nor times out a command:
every command of ours runs under ``asyncio.timeout(command_timeout_s)`` (or reads with a
timeout of its own), and the caller decides what a failure means. redis-py's own write timeout
(``socket_timeout``) is an ``asyncio.wait_for``, which on Python 3.11 returns the result and
drops a cancel that lands as the write completes (CPython gh-86296): a cancelled call polling
Redis then polled on until its deadline. ``asyncio.timeout`` has no such race.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from agentrt.server.config import RedisConfig

__all__ = ["redis_client"]


def redis_client(config: RedisConfig, password: str | None = None) -> aioredis.Redis:
    """A client of ``config``'s server, user and TLS, with a connection pool of its own.

    Args:
        config: The ``[redis]`` section.
        password: From ``read_password`` (None: no password).
    """
    options: dict[str, Any] = {
        "username": config.username or None,
        "password": password,
        "socket_connect_timeout": config.connect_timeout_s,
        "socket_timeout": None,  # see the module's docstring: our asyncio.timeout bounds each command
        "retry": Retry(NoBackoff(), 0),  # one layer owns retries: the link reconnects with backoff
    }
    if config.tls:
        options.update(
            ssl_ca_certs=config.ca_file or None,
            ssl_certfile=config.cert_file or None,
            ssl_keyfile=config.key_file or None,
        )
    return aioredis.Redis.from_url(config.url, **options)
