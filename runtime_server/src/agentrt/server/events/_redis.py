"""One replica's link to Redis: publishes, channel subscriptions, health probes and reconnects.

Only imported when ``[redis] url`` is set (it imports redis-py). The link is a fast path and
never the truth: a message that cannot go out is dropped (the store has the fact), and while
Redis is down every replica falls back to what it did without Redis (followers re-read the
store, owners see cancels in their lease renewals). Each transition between up and down is
logged once and counted (``agentrt_redis_fallback_total``); the ``agentrt_redis_up`` gauge says
where the link stands. Reconnection backs off with full jitter (``core.reconnect_delay_s``).

One pub/sub connection carries every subscription of the replica: its owner channel (wakes),
the interest and released channels always, and the channel of each run it has local followers
of. A second connection publishes
(pipelined, in batches) and probes the server with PING, which is how a partition (no FIN, no
RST) is noticed within ``command_timeout_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import deque
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import AuthenticationError, NoPermissionError, RedisError, ResponseError

from agentrt.server.config import RedisConfig
from agentrt.server.core import LinkChange, link_change, reconnect_delay_s
from agentrt.server.events._redis_client import redis_client
from agentrt.server.events._redis_files import RedisSetupError, check_tls_files
from agentrt.server.events._wire import (
    RunMessage,
    WakeMessage,
    decode_interest,
    decode_run_message,
    decode_wake,
    encode_interest,
    interest_channel,
    owner_channel,
    released_channel,
    run_of_channel,
)
from agentrt.server.telemetry import Counters

__all__ = ["RedisLink"]

log = logging.getLogger("agentrt.redis")

_BATCH = 256  # messages per pipelined round trip
_READ_WAIT_S = 1.0


class RedisLink:
    """The replica's Redis connections, kept up in the background.

    Args:
        config: The ``[redis]`` section.
        password: From :func:`read_password`.
        origin: This replica's id (its lease owner name): its own messages are skipped.
        counters: Where fallbacks and drops are counted.
        on_run: Gets each run message from another replica.
        on_wake: Gets each wake sent to this replica.
        on_unheard: Gets the run id of a run channel a publish reached nobody else on.
        on_interest: Gets the run id another replica now listens on.
        on_released: Gets each message of the released channel as it came (its reader decodes
            it, and counts what does not decode).
    """

    def __init__(
        self,
        *,
        config: RedisConfig,
        password: str | None,
        origin: str,
        counters: Counters,
        on_run: Callable[[RunMessage], None],
        on_wake: Callable[[WakeMessage], None],
        on_unheard: Callable[[str], None] = lambda run_id: None,
        on_interest: Callable[[str], None] = lambda run_id: None,
        on_released: Callable[[bytes], None] = lambda data: None,
        rand: Callable[[], float] = random.random,
    ):
        self.config = config
        self.origin = origin
        self.up: bool | None = None  # None until the first connection attempt ends
        self._password = password
        self._counters = counters
        self._on_run = on_run
        self._on_wake = on_wake
        self._on_unheard = on_unheard
        self._on_interest = on_interest
        self._on_released = on_released
        self._interest_channel = interest_channel(config.key_prefix)
        self._released_channel = released_channel(config.key_prefix)
        self._rand = rand
        self._owner_channel = owner_channel(config.key_prefix, origin)
        self._wanted: set[str] = set()  # run channels with local followers
        self._subscribed: set[str] = set()  # what the pub/sub connection has subscribed
        self._changed = asyncio.Event()
        self._outbox: deque[tuple[str, bytes]] = deque()
        self._outbox_ready = asyncio.Event()
        self._all_sent = asyncio.Event()  # nothing queued nor in flight (``flush``)
        self._all_sent.set()
        self._task: asyncio.Task[None] | None = None
        self._client: aioredis.Redis | None = None
        self._pubsub: Any = None

    # -- the replica's side -------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect once, then keep the link up in the background.

        Raises:
            RedisSetupError: Redis refused our user or password, or the ACL denies a command we
                need: a configuration fault, not an outage. Unreachable Redis is not an error:
                the replica starts on store polling and keeps trying.
        """
        check_tls_files(self.config)
        try:
            await self._connect()
        except AuthenticationError:
            await self._close()
            user = self.config.username or "default"
            raise RedisSetupError(
                f"{self.config.url} refused user {user!r}: wrong password, or no such user "
                "(username, password_file / password_env)"
            ) from None
        except NoPermissionError:
            await self._close()
            raise RedisSetupError(
                f"{self.config.url}: the ACL of user {self.config.username or 'default'!r} denies "
                f"PING, PUBLISH or SUBSCRIBE on channels {self.config.key_prefix}*"
            ) from None
        except (RedisError, OSError, TimeoutError) as exc:
            await self._close()
            self._set_up(False, exc)
        self._task = asyncio.get_running_loop().create_task(self._keep_up(), name="redis-link")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._close()

    def want(self, channel: str) -> None:
        """Subscribe ``channel`` (soon; synchronous, so a stream can ask before its first await)."""
        if channel not in self._wanted:
            self._wanted.add(channel)
            self._changed.set()

    def unwant(self, channel: str) -> None:
        if channel in self._wanted:
            self._wanted.discard(channel)
            self._changed.set()

    def publish(self, channel: str, data: bytes) -> None:
        """Queue ``data`` for ``channel``; never blocks. Dropped while down or when the queue is full."""
        if not self.up:
            return  # the store carries it; stale messages after a recovery would only mislead
        if len(self._outbox) >= self.config.max_pending_messages:
            self._counters.inc("redis_dropped")
            return
        self._outbox.append((channel, data))
        self._all_sent.clear()
        self._outbox_ready.set()

    async def flush(self, timeout_s: float) -> None:
        """Wait, at most ``timeout_s``, until what was queued has gone out (or the link went
        down, which drops it): a draining replica's last messages before it closes the link."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._all_sent.wait()

    # -- the link -----------------------------------------------------------------------------------

    def new_client(self) -> aioredis.Redis:
        """A client of this link's server, user and TLS, with a connection pool of its own."""
        return redis_client(self.config, self._password)

    async def _connect(self) -> None:
        client = self._client = self.new_client()
        timeout = self.config.connect_timeout_s + self.config.command_timeout_s
        async with asyncio.timeout(timeout):
            await client.ping()
            # An empty message proves PUBLISH is allowed; receivers drop it (it does not decode).
            await client.publish(self._owner_channel, b"")
            pubsub = self._pubsub = client.pubsub()
            await pubsub.subscribe(
                self._owner_channel, self._interest_channel, self._released_channel, *self._wanted
            )
            await self._announce(self._wanted)  # owners that stopped publishing them start again
        self._subscribed = {
            self._owner_channel,
            self._interest_channel,
            self._released_channel,
            *self._wanted,
        }
        self._outbox.clear()
        self._all_sent.set()
        self._set_up(True)

    async def _close(self) -> None:
        pubsub, client = self._pubsub, self._client
        self._pubsub = self._client = None
        # Closing a broken connection may fail as it likes, and behind a partition it may hang.
        with contextlib.suppress(Exception):
            if pubsub is not None:
                async with asyncio.timeout(self.config.command_timeout_s):
                    await pubsub.aclose()
        with contextlib.suppress(Exception):
            if client is not None:
                async with asyncio.timeout(self.config.command_timeout_s):
                    await client.aclose()

    async def _keep_up(self) -> None:
        failures = 0 if self.up else 1
        while True:
            if self._client is None:
                delay = reconnect_delay_s(
                    failures=failures,
                    base_s=self.config.reconnect_base_s,
                    cap_s=self.config.reconnect_cap_s,
                    rand=self._rand(),
                )
                await asyncio.sleep(delay)
                try:
                    await self._connect()
                except (RedisError, OSError, TimeoutError) as exc:  # auth errors too: keep trying
                    await self._close()
                    failures += 1
                    self._set_up(False, exc)
                    continue
            failures = 0
            try:
                await self._serve()
            except (RedisError, OSError, TimeoutError) as exc:
                self._set_up(False, exc)
            except Exception as exc:  # a bug: the link must outlive it (the store covers the gap)
                log.error("the redis link failed; reconnecting", exc_info=exc)
                self._set_up(False, exc)
            await self._close()
            failures = 1

    async def _serve(self) -> None:
        """Read, write, probe and follow subscription changes until one of them fails."""
        tasks = [
            asyncio.create_task(self._read()),
            asyncio.create_task(self._write()),
            asyncio.create_task(self._probe()),
            asyncio.create_task(self._follow_wanted()),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()  # raises the failure
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _read(self) -> None:
        while True:
            message = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=_READ_WAIT_S)
            if message is None or message.get("type") != "message":
                continue
            channel = message["channel"].decode("utf-8", "replace")
            data = message["data"]
            if channel == self._owner_channel:
                wake = decode_wake(data)
                if wake is not None and wake.origin != self.origin:
                    self._on_wake(wake)
            elif channel == self._interest_channel:
                interest = decode_interest(data)
                if interest is not None and interest.origin != self.origin:
                    self._on_interest(interest.run_id)
            elif channel == self._released_channel:
                self._on_released(data)
            else:
                run = decode_run_message(data)
                if run is not None and run.origin != self.origin:
                    self._on_run(run)

    async def _write(self) -> None:
        assert self._client is not None
        while True:
            await self._outbox_ready.wait()
            if not self._outbox:
                self._outbox_ready.clear()
                self._all_sent.set()
                continue
            batch = [self._outbox.popleft() for _ in range(min(_BATCH, len(self._outbox)))]
            async with self._client.pipeline(transaction=False) as pipe:
                for channel, data in batch:
                    pipe.publish(channel, data)
                async with asyncio.timeout(self.config.command_timeout_s):
                    receivers = await pipe.execute()
            for (channel, _), heard in zip(batch, receivers, strict=True):
                # PUBLISH counts this replica's own subscription too.
                others = int(heard) - (1 if channel in self._subscribed else 0)
                run_id = run_of_channel(self.config.key_prefix, channel) if others <= 0 else None
                if run_id is not None:
                    self._on_unheard(run_id)

    async def _probe(self) -> None:
        assert self._client is not None
        while True:
            await asyncio.sleep(self.config.health_interval_s)
            async with asyncio.timeout(self.config.command_timeout_s):
                await self._client.ping()

    async def _follow_wanted(self) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            wanted = {self._owner_channel, self._interest_channel, self._released_channel, *self._wanted}
            add, drop = wanted - self._subscribed, self._subscribed - wanted
            async with asyncio.timeout(self.config.command_timeout_s):
                if add:
                    await self._pubsub.subscribe(*add)
                    await self._announce(add)
                if drop:
                    await self._pubsub.unsubscribe(*drop)
            self._subscribed = wanted

    async def _announce(self, channels: set[str]) -> None:
        """Tell every replica this one now listens on these run channels."""
        assert self._client is not None
        runs = [r for c in channels if (r := run_of_channel(self.config.key_prefix, c)) is not None]
        if not runs:
            return
        async with self._client.pipeline(transaction=False) as pipe:  # one round trip for them all
            for run_id in runs:
                pipe.publish(self._interest_channel, encode_interest(self.origin, run_id))
            await pipe.execute()

    def _set_up(self, up: bool, exc: BaseException | None = None) -> None:
        change = link_change(was_up=self.up, up=up)
        self.up = up
        if change is LinkChange.WENT_DOWN:
            self._counters.inc("redis_fallback")
            self._outbox.clear()
            self._all_sent.set()
            why = _describe(exc)
            log.warning(
                "redis at %s is unreachable (%s): live events and signals fall back to store polling",
                self.config.url,
                why,
            )
        elif change is LinkChange.CAME_UP:
            log.info("redis at %s is up: live events and signals cross replicas through it", self.config.url)


def _describe(exc: BaseException | None) -> str:
    """An outage's cause for the log: its class, and redis-py's text only for connection errors
    (they name the address; none of them carries the password)."""
    if exc is None:
        return "unknown"
    if isinstance(exc, ResponseError):
        return exc.__class__.__name__  # the server's words could echo a command's arguments
    return f"{exc.__class__.__name__}: {exc}" if str(exc) else exc.__class__.__name__
