"""The configured tool hosts of one runtime process: spawned children, channels, SIGHUP reloads.

The runtime starts whether or not its hosts answer: a host that does not is routed to all the
same and its tools are learned when it does (``ToolRouter.watch_host``). What the configuration
names but no host serves is an error at start only once every host has answered; before that
those tools are *pending*. A reload (SIGHUP) adds, removes and replaces hosts by name, after
checking the whole new list: a bad entry changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from agentrt.server.config import ConfigError, Settings, ToolHostConfig
from agentrt.server.core import tool_hosts
from agentrt.server.tools import HostChannel, HostTls, SpawnedToolHost, ToolHostError, ToolRouter
from agentrt.toolhost.security import is_loopback_host

__all__ = ["ToolHostSet"]

log = logging.getLogger("agentrt.server")

_Opened = tuple[ToolHostConfig, HostChannel | None]  # None: a host to spawn


class ToolHostSet:
    """Adds the configured hosts to the router, keeps the children it spawned, applies reloads.

    Args:
        router: Where calls are routed.
        settings: The configuration at start (its ``tool_hosts`` follow reloads).
        ledger_keep_s: ``--ledger-keep-s`` for spawned hosts (None: their default).
    """

    def __init__(self, *, router: ToolRouter, settings: Settings, ledger_keep_s: float | None) -> None:
        self.router = router
        self.settings = settings
        self.ledger_keep_s = ledger_keep_s
        self.spawned: dict[str, SpawnedToolHost] = {}

    async def start(self) -> None:
        """Spawn our own hosts and route to every host, up or not.

        Raises:
            ConfigError: a host's TLS settings cannot be used, a spawned host did not start, a
                named tool no host serves though every host answered, or two hosts list one tool.
        """
        settings = self.settings
        self.router.expected = named_tools(settings)
        opened = self._open(settings, settings.tool_hosts)
        try:
            await asyncio.gather(*(self._add(pair) for pair in opened))
        except RuntimeError as exc:  # a spawned host did not start
            raise ConfigError(str(exc)) from exc
        check_served(settings, self.router)

    async def reload(self, settings: Settings) -> bool:
        """Add, remove and replace hosts as ``settings`` lists them (by name); the others stay.

        Returns:
            True when the new list was applied; False when it was refused (logged), nothing changed.
        """
        old = {host.name: host for host in self.settings.tool_hosts}
        new = {host.name: host for host in settings.tool_hosts}
        replaced = [name for name in new if name in old and new[name] != old[name]]
        added = [name for name in new if name not in old]
        removed = [name for name in old if name not in new]
        try:
            opened = self._open(settings, [new[name] for name in (*added, *replaced)])
        except ConfigError as exc:
            log.error("config reload (SIGHUP) refused, the tool hosts stay as they were: %s", exc)
            return False
        if settings.model_copy(update={"tool_hosts": self.settings.tool_hosts}) != self.settings:
            log.warning("config reload (SIGHUP) applies tool_hosts only: other changes need a restart")
        for name in (*removed, *replaced):
            await self.router.remove_host(name)
            spawned = self.spawned.pop(name, None)
            if spawned is not None:
                await spawned.stop()
        self.settings = self.settings.model_copy(update={"tool_hosts": settings.tool_hosts})
        results = await asyncio.gather(*(self._add(pair) for pair in opened), return_exceptions=True)
        for (host, _), result in zip(opened, results, strict=True):
            if isinstance(result, BaseException):
                log.error("config reload (SIGHUP): tool host %r could not be added: %s", host.name, result)
        log.info(
            "config reload (SIGHUP): tool hosts added %s, removed %s, replaced %s", added, removed, replaced
        )
        log_pending(self.router)
        return True

    async def stop(self) -> None:
        """Stop the hosts we spawned (after the router closed its channels to them)."""
        for spawned in self.spawned.values():
            await spawned.stop()
        self.spawned.clear()

    def _open(self, settings: Settings, hosts: list[ToolHostConfig]) -> list[_Opened]:
        """Each host with its channel (None for one to spawn); nothing is sent yet.

        Raises:
            ConfigError: a host's TLS settings or files cannot be used.
        """
        opened: list[_Opened] = []
        for host in hosts:
            tls = host_tls(settings, host)
            if host.spawn:
                opened.append((host, None))
                continue
            try:
                channel = self.router.open_host(host.name, host.target, tls=tls, pooled=host.pooled)
            except ToolHostError as exc:
                raise ConfigError(str(exc)) from exc
            opened.append((host, channel))
        return opened

    async def _add(self, pair: _Opened) -> None:
        """Spawn the host if it is ours, then route to it whether or not it answers yet.

        Raises:
            RuntimeError: a spawned host did not start.
        """
        host, channel = pair
        settings = self.settings
        signer = None
        if channel is None:
            data_dir = host.data_dir or str(Path(settings.data_dir) / f"toolhost-{host.name}")
            # Our own child trusts a key pair of its own, grants on or off: it obeys no
            # other local process, and rotating the configured key never locks it out.
            spawned = await SpawnedToolHost.start(
                data_dir=data_dir,
                plugins=host.plugins,
                entrypoints=host.entrypoints,
                grant_ttl_s=settings.grants.ttl_s,
                encryption_key_file=settings.encryption.key_file,
                ledger_keep_s=self.ledger_keep_s,
            )
            self.spawned[host.name] = spawned
            channel = self.router.open_host(host.name, spawned.address, tls=spawned.tls)
            signer = spawned.signer
        policy = tool_hosts.RelistPolicy(
            every_s=host.relist_s, base_s=settings.retry_base_s, cap_s=settings.retry_cap_s
        )
        await self.router.watch_host(
            channel, signer=signer, first_wait_s=settings.connect_timeout_s, policy=policy
        )


def named_tools(settings: Settings) -> frozenset[str]:
    """Every tool the configuration names: the agents' and the inline agents' allow-list."""
    agents = (tool for agent in settings.agents.values() for tool in agent.tools)
    return frozenset((*agents, *settings.inline_agents.tools))


def check_served(settings: Settings, tools: ToolRouter) -> None:
    """Named tools that no host serves: an error once every host answered; pending before that.

    Raises:
        ConfigError: a named tool no host serves while every host answered, or two hosts
            listing one tool.
    """
    for conflict in tools.conflicts:
        # Hosts answer in any order at start: name them in a stable one.
        one, other = sorted((conflict.kept, conflict.refused))
        raise ConfigError(f"tool {conflict.tool!r} is served by both {one!r} and {other!r}")
    served = set(tools.tool_names())
    for name, agent in settings.agents.items():
        missing = [t for t in agent.tools if t not in served]
        if missing:
            raise ConfigError(f"agent {name!r} names tools no tool host serves: {missing}")
    missing = [t for t in settings.inline_agents.tools if t not in served]
    if missing:
        raise ConfigError(f"inline_agents.tools names tools no tool host serves: {missing}")
    log_pending(tools)


def log_pending(tools: ToolRouter) -> None:
    """Say once (at start, after a reload) which tools wait for a host that has not answered."""
    pending = sorted(tools.pending_tools())
    if pending:
        log.warning(
            "tools %s are pending: tool hosts %s have not answered ListTools yet; a call of one waits "
            "for its host before it starts ([timeouts] connect_s for each of tool_attempts), then fails "
            "TRANSIENT, unsent",
            pending,
            tools.unlisted_hosts(),
        )


def host_tls(settings: Settings, host: ToolHostConfig) -> HostTls | None:
    """mTLS to a host at an address; plaintext only on loopback or with ``--insecure``.

    Raises:
        ConfigError: a non-loopback host address without ``ca_file`` (and no ``--insecure``).
    """
    if host.spawn:
        return None  # a spawned host gets its own TLS material
    if host.tls:
        return HostTls(
            ca_file=host.ca_file,
            cert_file=host.cert_file,
            key_file=host.key_file,
            server_name=host.server_name,
        )
    if not all(is_loopback_host(name) for name in host.host_names):
        if not settings.insecure:
            raise ConfigError(
                f"tool host {host.name!r} at {host.target} is not on loopback: configure its ca_file, "
                "cert_file and key_file (mTLS), or pass --insecure"
            )
        log.warning(
            "INSECURE (--insecure): calling tool host %r at %s without TLS; anyone on the path can read "
            "and alter tool calls",
            host.name,
            host.target,
        )
    return None
