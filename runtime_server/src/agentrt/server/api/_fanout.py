"""Assembles the Redis fan-out of one runtime process ([redis]): link, bus, wakes and released
runs (R10.1).

Off by default: without ``[redis] url`` the server keeps the in-process :class:`EventBus` and
redis-py is never imported.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
from typing import TYPE_CHECKING

from agentrt.server.config import ConfigError, RedisConfig, Settings
from agentrt.server.engine import ChannelWakes, Engine, ReleasedInbox, WakeInbox
from agentrt.server.events import EventBus, RedisEventBus
from agentrt.server.events._redis_files import RedisSetupError, check_tls_files, read_password
from agentrt.server.telemetry import Counters
from agentrt.server.tools import ToolRouter

if TYPE_CHECKING:
    from agentrt.server.events._redis import RedisLink
    from agentrt.server.tools._shared_slots import SharedToolSlots

__all__ = ["Fanout", "build_bus", "check_redis"]

REDIS_MISSING = "redis.url is set but redis-py is not installed: pip install 'agentrt-server[redis]'"


def build_bus(settings: Settings) -> EventBus:
    """The process's event bus: across replicas with ``[redis]``, in process without."""
    events, size = settings.streams.follower_buffer_events, settings.streams.follower_buffer_bytes
    if settings.redis.enabled:
        # The origin is the engine's owner id, set once the engine exists (Fanout.start).
        return RedisEventBus(
            origin="", key_prefix=settings.redis.key_prefix, buffer_events=events, buffer_bytes=size
        )
    return EventBus(buffer_events=events, buffer_bytes=size)


def check_redis(config: RedisConfig) -> str | None:
    """What ``[redis]`` needs from this machine, checked before anything connects: the package,
    the password and the TLS files. Returns the password (None: no password).

    Raises:
        ConfigError: redis-py missing, or a password or TLS file or variable that cannot be used.
    """
    if importlib.util.find_spec("redis") is None:
        raise ConfigError(REDIS_MISSING)
    try:
        check_tls_files(config)
        return read_password(config)
    except RedisSetupError as exc:
        raise ConfigError(f"redis: {exc}") from None


class Fanout:
    """The running fan-out: the link to Redis and the tasks handing wakes and released runs to
    the engine."""

    def __init__(
        self,
        *,
        link: RedisLink,
        inbox: WakeInbox,
        released: ReleasedInbox,
        slots: SharedToolSlots | None = None,
    ):
        self.link = link
        self.inbox = inbox
        self.released = released
        self.slots = slots
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    async def start(
        cls,
        config: RedisConfig,
        *,
        password: str | None,
        bus: RedisEventBus,
        engine: Engine,
        counters: Counters,
        tools: ToolRouter,
    ) -> Fanout:
        """Connect (a refused user or password is a ConfigError; an unreachable Redis is not) and
        wire the bus, the engine's wakes and (``tool_limits = "global"``) the tools' slots to it.

        Raises:
            ConfigError: Redis refused the configured user, password or ACL.
        """
        from agentrt.server.events._redis import RedisLink  # imports redis-py: only when configured

        inbox = WakeInbox()
        released = ReleasedInbox(origin=engine.owner)
        bus.origin = engine.owner
        link = RedisLink(
            config=config,
            password=password,
            origin=engine.owner,
            counters=counters,
            on_run=bus.deliver,
            on_wake=inbox.received,
            on_unheard=bus.unheard,
            on_interest=bus.heard,
            on_released=released.received,
        )
        try:
            await link.start()
        except RedisSetupError as exc:
            raise ConfigError(f"redis: {exc}") from None
        bus.attach(link)
        engine.wakes = engine.releases = ChannelWakes(
            link=link, key_prefix=config.key_prefix, origin=engine.owner
        )
        slots = None
        if config.tool_limits == "global":
            from agentrt.server.tools._shared_slots import SharedToolSlots, SlotsNotPermitted

            slots = SharedToolSlots.replacing(
                tools.slots,
                client=link.new_client(),
                key_prefix=config.key_prefix,
                lease_s=config.slot_lease_s,
                command_timeout_s=config.command_timeout_s,
            )
            try:
                await slots.check()
            except SlotsNotPermitted as exc:
                await slots.aclose()
                await link.close()
                raise ConfigError(f"redis: {exc}") from None
            tools.slots = slots
        return cls(link=link, inbox=inbox, released=released, slots=slots)

    @property
    def up(self) -> bool | None:
        return self.link.up

    def serve_wakes(self, engine: Engine) -> None:
        """Hand received wakes and released runs to ``engine`` from now on (once it has started)."""
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self.inbox.run_forever(engine.on_wake)),
            loop.create_task(self.released.run_forever(engine.on_released)),
        ]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        # A drain's last messages (the leases it released) go out before the link closes.
        await self.link.flush(self.link.config.command_timeout_s)
        await self.link.close()
        if self.slots is not None:
            await self.slots.aclose()
