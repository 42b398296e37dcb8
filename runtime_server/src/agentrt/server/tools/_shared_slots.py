"""Tool concurrency limits across replicas, counted in Redis (``[redis] tool_limits = "global"``).

A limited tool's slots are one sorted set in Redis (``{prefix}slots:{tool}``): each member is a
call holding a slot, scored by when its hold expires (Redis's own clock, in a script, so replica
clocks do not matter). Taking a slot is one script call that first forgets expired holds; a held
slot is renewed every third of ``slot_lease_s``, and given back when the call ends. A replica
killed mid-call leaks nothing for longer than ``slot_lease_s``.

A per-tenant cap (``max_concurrent_calls_per_tenant``) is a set of the same kind per tool and
tenant, ``{prefix}tenant-slots:{tool}:{h}`` with ``h`` the first 128 bits of the tenant id's
SHA-256 in hex: a tenant id cannot reach another key (``tenant-slots:`` is never a tool's
``slots:`` key, and the fixed-length digest at the end keeps tool names with ``:`` apart), and
the key's length does not grow with the id. The order is the process's (:class:`ToolSlots`) and
extends it: this process's tenant slot, the global tenant slot, this process's tool slot, the
global tool slot. A call waiting at any step holds only steps before it, and every call goes
the same way, so no two calls wait on each other, and a tenant at its global cap waits without
a tool slot of this process. Keys expire ``2 x slot_lease_s`` after their last use, so idle
tenants cost Redis nothing.

The process's own limit still applies first (:class:`ToolSlots`), so a replica never asks Redis
for more than it could run. While Redis cannot be reached a call is limited by that process
limit alone (logged once per transition): the limit fails open to N replicas x the limit rather
than failing calls on a Redis outage.

Cost: two round trips per limited call (take, give back), three with a per-tenant cap too (take
the tenant's slot, take the tool's, give both back in one script); one renewal (of both holds,
one script) per ``slot_lease_s / 3`` of a long call; and while every slot is taken a retry every
``poll_s`` (10 ms growing to 200 ms) until one frees up or the call's deadline passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from redis.exceptions import NoPermissionError, RedisError

from agentrt.server.tools._slots import SlotTimeout, ToolSlots

__all__ = ["SharedToolSlots", "SlotsNotPermitted"]

log = logging.getLogger("agentrt.tools")

# KEYS[1] a slot set; ARGV: limit, holder, lease ms. 1 when the slot was taken.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
  redis.call('PEXPIRE', KEYS[1], 2 * tonumber(ARGV[3]))
  return 1
end
return 0
"""
# KEYS: the sets the call holds a slot of; ARGV: holder, lease ms. How many holds were still there.
_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local kept = 0
for _, key in ipairs(KEYS) do
  if redis.call('ZSCORE', key, ARGV[1]) then
    redis.call('ZADD', key, 'XX', now + tonumber(ARGV[2]), ARGV[1])
    redis.call('PEXPIRE', key, 2 * tonumber(ARGV[2]))
    kept = kept + 1
  end
end
return kept
"""
# KEYS: the sets the call holds a slot of; ARGV: holder. One round trip for both holds.
_GIVE = """
for _, key in ipairs(KEYS) do
  redis.call('ZREM', key, ARGV[1])
end
return 0
"""
_FIRST_POLL_S = 0.01
_MAX_POLL_S = 0.2


class SlotsNotPermitted(Exception):
    """The ACL denies the commands the global limits run (a configuration fault, not an outage)."""


class SharedToolSlots(ToolSlots):
    """:class:`ToolSlots` whose limits hold across every replica sharing one Redis.

    Args:
        client: A redis-py asyncio client (its own connection pool).
        key_prefix: ``[redis] key_prefix``.
        lease_s: How long a hold lasts without renewal (a killed replica's holds end then).
        command_timeout_s: A Redis command taking longer counts as Redis being unreachable.
    """

    def __init__(
        self,
        *,
        client: Any,
        key_prefix: str,
        lease_s: float = 30.0,
        command_timeout_s: float = 2.0,
        limits: Mapping[str, int] | None = None,
        default: int = 0,
        per_tenant: Mapping[str, int] | None = None,
        default_per_tenant: int = 0,
    ) -> None:
        super().__init__(
            limits=limits, default=default, per_tenant=per_tenant, default_per_tenant=default_per_tenant
        )
        self._client = client
        self._prefix = key_prefix
        self._lease_ms = int(lease_s * 1000)
        self._command_timeout_s = command_timeout_s
        self._take = client.register_script(_TAKE)
        self._renew = client.register_script(_RENEW)
        self._give = client.register_script(_GIVE)
        self.reachable = True  # False while calls are limited per process only

    @classmethod
    def replacing(cls, slots: ToolSlots, **options: Any) -> SharedToolSlots:
        """The shared version of ``slots``, with the same per-process limits and per-tenant caps."""
        return cls(
            limits=slots._limits,
            default=slots._default,
            per_tenant=slots._per_tenant,
            default_per_tenant=slots._default_per_tenant,
            **options,
        )

    def tool_key(self, tool: str) -> str:
        """The Redis key of ``tool``'s slots."""
        return f"{self._prefix}slots:{tool}"

    def tenant_key(self, tool: str, tenant: str) -> str:
        """The Redis key of ``tenant``'s slots of ``tool`` (the tenant id hashed: see the module)."""
        digest = hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return f"{self._prefix}tenant-slots:{tool}:{digest}"

    async def check(self) -> None:
        """Take, renew and give back a slot of no tool, so a missing ACL permission fails the start.

        An unreachable Redis is not an error here: calls fall back to the process limit.

        Raises:
            SlotsNotPermitted: the ACL denies a command or key the limits need.
        """
        # No tool has an empty name; both key families, as the ACL could tell them apart.
        keys, holder = [self.tool_key(""), self.tenant_key("", "")], uuid.uuid4().hex
        try:
            async with asyncio.timeout(self._command_timeout_s):
                for key in keys:
                    await self._take(keys=[key], args=[1, holder, self._lease_ms])
                await self._renew(keys=keys, args=[holder, self._lease_ms])
                await self._give(keys=keys, args=[holder])
        except NoPermissionError:
            raise SlotsNotPermitted(
                f"the ACL denies the global tool limits' commands on keys {self._prefix}* (README, Redis)"
            ) from None
        except (RedisError, OSError, TimeoutError) as exc:
            self._note_reachable(False, exc)

    @asynccontextmanager
    async def hold(
        self, tool: str, limit: int, timeout_s: float, *, tenant: str = "", tenant_limit: int = 0
    ) -> AsyncIterator[float]:
        started = time.monotonic()
        deadline = started + timeout_s
        holder = uuid.uuid4().hex
        held: list[str] = []  # the Redis sets this call holds a slot of, to renew and give back
        renewing: asyncio.Task[None] | None = None  # renews what ``held`` names at each turn
        async with self._tenant_slot(tool, tenant, tenant_limit, deadline):
            try:
                if tenant_limit:
                    key = self.tenant_key(tool, tenant)
                    if await self._wait_for_slot(key, holder, tool, tenant_limit, deadline, per_tenant=True):
                        held.append(key)
                        # Renewed while it polls for the tool's slot too, which may outlast a lease.
                        renewing = asyncio.create_task(self._keep(held, holder))
                async with self._tool_slot(tool, limit, deadline):
                    if limit:
                        key = self.tool_key(tool)
                        if await self._wait_for_slot(key, holder, tool, limit, deadline, per_tenant=False):
                            held.append(key)
                            renewing = renewing or asyncio.create_task(self._keep(held, holder))
                    try:
                        yield time.monotonic() - started
                    finally:
                        await _stop(renewing)
                        renewing = None
                        # Before this process's tool slot goes, so a call waiting for it finds the
                        # shared slot free too.
                        if held:
                            await self._give_back(held, holder)
                            held.clear()
            finally:
                # The tenant's slot, when no tool slot came in time or the wait was cut.
                await _stop(renewing)
                if held:
                    await self._give_back(held, holder)

    async def _wait_for_slot(
        self, key: str, holder: str, tool: str, limit: int, deadline: float, *, per_tenant: bool
    ) -> bool:
        """True once a shared slot is held; False when Redis is unreachable (process limit only).

        Raises:
            SlotTimeout: every slot stayed taken until the deadline.
        """
        poll_s = _FIRST_POLL_S
        while True:
            try:
                async with asyncio.timeout(self._command_timeout_s):
                    took = await self._take(keys=[key], args=[limit, holder, self._lease_ms])
            except (RedisError, OSError, TimeoutError) as exc:
                self._note_reachable(False, exc)
                return False
            except asyncio.CancelledError:
                # The script may have taken the slot before the cancel landed: unused, it would
                # stay held (every replica's calls of the tool kept out) until its lease ended.
                # The holder id is this call's alone, so giving it back frees nothing else.
                await asyncio.shield(self._give_back([key], holder))
                raise
            self._note_reachable(True)
            if took == 1:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                whose = f"at most {limit} calls of one tenant" if per_tenant else f"at most {limit} calls"
                raise SlotTimeout(
                    f"no free slot of tool {tool!r}{' for this tenant' if per_tenant else ''} ({whose} "
                    "at once over all replicas) before the call's deadline",
                    tool=tool,
                    limit=limit,
                    per_tenant=per_tenant,
                )
            await asyncio.sleep(min(poll_s, left))
            poll_s = min(_MAX_POLL_S, poll_s * 2)

    async def _keep(self, keys: list[str], holder: str) -> None:
        while True:
            await asyncio.sleep(self._lease_ms / 3000)
            with contextlib.suppress(RedisError, OSError, TimeoutError):  # a lost hold only over-admits
                async with asyncio.timeout(self._command_timeout_s):
                    await self._renew(keys=list(keys), args=[holder, self._lease_ms])

    async def _give_back(self, keys: list[str], holder: str) -> None:
        with contextlib.suppress(RedisError, OSError, TimeoutError):  # it expires with its lease
            async with asyncio.timeout(self._command_timeout_s):
                await self._give(keys=keys, args=[holder])

    def _note_reachable(self, reachable: bool, exc: BaseException | None = None) -> None:
        if reachable == self.reachable:
            return
        self.reachable = reachable
        if reachable:
            log.info("global tool limits: Redis is reachable again; limits hold over all replicas")
        else:
            log.warning(
                "global tool limits: Redis is unreachable (%s); each replica limits its own calls only",
                type(exc).__name__,
            )

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self._client.aclose()


async def _stop(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
