"""The router with hosts that come and go: pending tools, re-lists, and reloads of the host list.

An in-process tool host on a loopback port that the router was given before it listened.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pydantic
import pytest

from agentrt.server.api._tool_hosts import ToolHostSet
from agentrt.server.config import ConfigError, Settings
from agentrt.server.core import LedgerSilence, ToolErrorCode, tool_hosts
from agentrt.server.tools import CallMetadata, HostTls, ToolRouter
from agentrt.server.tools._watcher import HostWatcher
from agentrt.toolhost import SideEffect, Tool, ToolContext, ToolHost, tool
from agentrt.toolhost.security import ReloadingServerCredentials, generate_dev_pki

FAST = tool_hosts.RelistPolicy(every_s=30.0, base_s=0.05, cap_s=0.2)


class Args(pydantic.BaseModel):
    n: int = 0


def echo_tool(version: str) -> Tool:
    @tool(
        name="watch.echo",
        description="echo",
        side_effect=SideEffect.READ_ONLY,
        idempotent=True,
        version=version,
    )
    async def echo(args: Args, ctx: ToolContext) -> dict[str, Any]:
        return {"n": args.n, "version": version}

    return echo


@tool(name="watch.extra", description="extra", side_effect=SideEffect.READ_ONLY, idempotent=True)
async def extra(args: Args, ctx: ToolContext) -> dict[str, Any]:
    return {}


def free_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def meta(key: str) -> CallMetadata:
    return CallMetadata(idempotency_key=key, run_id="run-1", call_id=key, attempt=1, fencing_token=1)


@pytest.fixture
async def router() -> AsyncIterator[ToolRouter]:
    router = ToolRouter(connect_s=0.3)
    try:
        yield router
    finally:
        await router.close()


async def wait_until(check: Any, polls: int = 500) -> None:
    """Poll ``check`` every 20 ms, at most ``polls`` times (the router's state changes in the background)."""
    for _ in range(polls):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("not within the bound")


async def test_a_pending_tool_fails_transient_unsent_then_is_served_once_its_host_is_up(
    router: ToolRouter, tmp_path: Path
) -> None:
    address = free_address()
    router.expected = frozenset({"watch.echo"})
    assert await router.watch_host(router.open_host("late", address), first_wait_s=1.0, policy=FAST) == []
    assert router.pending_tools() == {"watch.echo"} and router.tool_names() == ["watch.echo"]
    began = time.monotonic()
    outcome = await router.invoke("watch.echo", "{}", metadata=meta("k1"), timeout_s=5.0)
    assert outcome.code is ToolErrorCode.TRANSIENT and outcome.connect_failed and outcome.never_sent
    assert 0.25 <= time.monotonic() - began < 3.0  # it waited the connect layer's time for the host
    assert await router.query("watch.echo", "{}", metadata=meta("k1"), timeout_s=1.0) is LedgerSilence.UNKNOWN
    assert "not reachable yet" in await router.preview("watch.echo", "{}", metadata=meta("k1"), timeout_s=1.0)
    # A tool nobody named is unknown at once, pending host or not.
    unknown = await router.invoke("other.tool", "{}", metadata=meta("k2"), timeout_s=5.0)
    assert unknown.code is ToolErrorCode.UNKNOWN_TOOL
    assert (
        await router.query("other.tool", "{}", metadata=meta("k2"), timeout_s=1.0) is LedgerSilence.NOT_FOUND
    )

    # A call waiting for the host is served as soon as the host comes up and is listed.
    router.connect_s = 10.0
    waiting = asyncio.ensure_future(
        router.invoke("watch.echo", '{"n": 3}', metadata=meta("k3"), timeout_s=10.0)
    )
    await asyncio.sleep(0.2)
    assert not waiting.done()
    host = ToolHost(tools={"watch.echo": echo_tool("1")}, data_dir=tmp_path / "host")
    await host.start(address)
    try:
        outcome = await waiting
        assert outcome.result_json is not None and json.loads(outcome.result_json) == {"n": 3, "version": "1"}
        assert router.pending_tools() == frozenset() and router.host_of("watch.echo") == "late"
        assert router.counters.get("tool_host_relist_count") >= 1  # the failed ListTools before it was up
    finally:
        await host.stop(grace=None)


async def test_a_restarted_host_is_listed_again_new_specs_served_dropped_tools_unrouted(
    router: ToolRouter, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    address = free_address()
    first = ToolHost(tools={"watch.echo": echo_tool("1"), "watch.extra": extra}, data_dir=tmp_path / "one")
    await first.start(address)
    try:
        listed = await router.watch_host(router.open_host("h", address), first_wait_s=5.0, policy=FAST)
        assert sorted(listed) == ["watch.echo", "watch.extra"]
    finally:
        await first.stop(grace=None)
    second = ToolHost(tools={"watch.echo": echo_tool("2")}, data_dir=tmp_path / "two")
    with caplog.at_level(logging.INFO, logger="agentrt.tools"):
        await second.start(address)
        try:
            await wait_until(lambda: (spec := router.spec("watch.echo")) is not None and spec.version == "2")
            assert router.host_of("watch.extra") == "" and router.tool_names() == ["watch.echo"]
            gone = await router.invoke("watch.extra", "{}", metadata=meta("k4"), timeout_s=5.0)
            assert gone.code is ToolErrorCode.UNKNOWN_TOOL
            served = await router.invoke("watch.echo", "{}", metadata=meta("k5"), timeout_s=5.0)
            assert served.result_json is not None and json.loads(served.result_json)["version"] == "2"
        finally:
            await second.stop(grace=None)
    assert "tool host 'h' listed its tools again (reconnected)" in caplog.text
    assert "new versions ['watch.echo']" in caplog.text and "gone ['watch.extra']" in caplog.text
    assert router.counters.get("tool_host_relist_count") >= 1


async def test_a_reload_checks_the_whole_list_first_and_applies_adds_removes_and_replacements(
    router: ToolRouter, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = free_address(), free_address()

    def settings(*hosts: dict[str, Any]) -> Settings:
        return Settings.model_validate({"tool_hosts": list(hosts), "data_dir": str(tmp_path)})

    hosts = ToolHostSet(router=router, settings=settings({"name": "a", "address": a}), ledger_keep_s=None)
    await hosts.start()  # nobody listens on either port: the runtime starts all the same
    assert router.host_names() == ["a"] and router.unlisted_hosts() == ["a"]
    bad = [
        {"name": "b", "address": b, "ca_file": str(tmp_path / "missing-ca.pem")},
        {"name": "b", "address": "dns:///tools.internal:5001"},  # off loopback without TLS
    ]
    for entry in bad:
        with caplog.at_level(logging.ERROR, logger="agentrt.server"):
            assert not await hosts.reload(settings({"name": "a", "address": b}, entry))
        assert router.host_names() == ["a"] and hosts.settings.tool_hosts[0].address == a
    assert caplog.text.count("config reload (SIGHUP) refused, the tool hosts stay as they were") == 2
    assert "missing-ca.pem" in caplog.text and "is not on loopback" in caplog.text
    # "a" moves to another address, "b" is new; then both go.
    assert await hosts.reload(settings({"name": "a", "address": b}, {"name": "b", "addresses": [a]}))
    assert sorted(router.host_names()) == ["a", "b"] and hosts.settings.tool_hosts[0].address == b
    assert await hosts.reload(settings())
    assert router.host_names() == []


@tool(name="watch.write", description="a write", side_effect=SideEffect.WRITE)
async def write(args: Args, ctx: ToolContext) -> dict[str, Any]:
    return {}


async def test_two_hosts_listing_one_tool_stop_the_start_and_later_the_first_keeps_it(
    router: ToolRouter, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = free_address(), free_address()
    first = ToolHost(tools={"watch.echo": echo_tool("1")}, data_dir=tmp_path / "a")
    second = ToolHost(tools={"watch.echo": echo_tool("1"), "watch.write": write}, data_dir=tmp_path / "b")
    later = ToolRouter(connect_s=0.3)
    await first.start(a)
    try:
        await second.start(b)
        hosts = [{"name": "a", "address": a}, {"name": "b", "address": b}]
        both = Settings.model_validate({"tool_hosts": hosts, "data_dir": str(tmp_path)})
        with pytest.raises(ConfigError, match=r"'watch\.echo' is served by both 'a' and 'b'"):
            await ToolHostSet(router=router, settings=both, ledger_keep_s=None).start()
        await second.stop(grace=None)
        # Later, "b" appears (as a pool) listing a tool "a" serves already: "a" keeps it.
        await later.watch_host(later.open_host("a", a), first_wait_s=5.0, policy=FAST)
        await later.watch_host(later.open_host("b", f"ipv4:{b}", pooled=True), first_wait_s=1.0, policy=FAST)
        second = ToolHost(tools={"watch.echo": echo_tool("1"), "watch.write": write}, data_dir=tmp_path / "b")
        with caplog.at_level(logging.WARNING, logger="agentrt.tools"):
            await second.start(b)
            await wait_until(lambda: later.host_of("watch.write") == "b")
        assert later.host_of("watch.echo") == "a"
        assert "tool 'watch.echo' is listed by tool hosts 'a' and 'b': calls go to 'a' only" in caplog.text
        assert (
            "tool host pool 'b' serves write tools ['watch.write']: its members must share one ledger"
            in caplog.text
        )
    finally:
        await later.close()
        await first.stop(grace=None)
        await second.stop(grace=None)


async def test_a_watcher_survives_a_failing_listener_and_lists_again(tmp_path: Path) -> None:
    address = free_address()
    host = ToolHost(tools={"watch.echo": echo_tool("1")}, data_dir=tmp_path / "host")
    await host.start(address)
    seen: list[list[str]] = []

    def on_listed(name: str, specs: Any, why: str) -> None:
        seen.append([s.name for s in specs])
        if len(seen) == 1:
            raise RuntimeError("a bug in the listener")

    router = ToolRouter()
    channel = router.open_host("h", address)
    watcher = HostWatcher(
        host=channel,
        on_listed=on_listed,
        on_failed=lambda name: None,
        policy=FAST,
        list_timeout_s=2.0,
        listed=False,
    )
    watcher.start()
    try:
        await wait_until(lambda: len(seen) >= 2)
        assert seen[:2] == [["watch.echo"], ["watch.echo"]]
    finally:
        await watcher.stop()
        await channel.close()
        await host.stop(grace=None)


async def test_a_host_that_cannot_be_spawned_on_reload_is_logged_and_the_others_are_added(
    router: ToolRouter, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a = free_address()
    hosts = ToolHostSet(router=router, settings=Settings(data_dir=str(tmp_path)), ledger_keep_s=None)
    await hosts.start()
    broken = {"name": "broken", "spawn": True, "plugins": ["no_such_plugin_module"], "entrypoints": False}
    new = Settings.model_validate(
        {"tool_hosts": [broken, {"name": "a", "address": a}], "data_dir": str(tmp_path)}
    )
    with caplog.at_level(logging.ERROR, logger="agentrt.server"):
        assert await hosts.reload(new)
    assert router.host_names() == ["a"]
    assert (
        "config reload (SIGHUP): tool host 'broken' could not be added: local tool host did not start"
        in caplog.text
    )
    await hosts.stop()


async def test_a_pool_over_mtls_spreads_calls_over_its_members(tmp_path: Path) -> None:
    pki = generate_dev_pki(tmp_path / "pki", hosts=("localhost",), clients=("runtime",))
    credentials = {
        "cert_file": str(pki.server_cert_file),
        "key_file": str(pki.server_key_file),
        "client_ca_file": str(pki.ca_file),
    }
    members = [
        ToolHost(
            tools={"watch.echo": echo_tool("1")},
            data_dir=tmp_path / f"member-{i}",
            credentials=ReloadingServerCredentials(**credentials),
        )
        for i in range(2)
    ]
    addresses = [free_address(), free_address()]
    cert, key = pki.client_files["runtime"]
    # Each member's certificate is for "localhost", not its IP: the pool names it (server_name).
    tls = HostTls(ca_file=str(pki.ca_file), cert_file=str(cert), key_file=str(key), server_name="localhost")
    router = ToolRouter()
    try:
        for member, address in zip(members, addresses, strict=True):
            await member.start(address)
        pool = router.open_host("pool", f"ipv4:{','.join(addresses)}", tls=tls, pooled=True)
        assert await router.watch_host(pool, first_wait_s=5.0, policy=FAST) == ["watch.echo"]
        for n in range(8):
            outcome = await router.invoke(
                "watch.echo", f'{{"n": {n}}}', metadata=meta(f"p{n}"), timeout_s=5.0
            )
            assert outcome.result_json is not None, outcome
        calls = [member.counters["invocations"] for member in members]
        assert sum(calls) == 8 and min(calls) >= 2, calls  # round robin, not one member
    finally:
        await router.close()
        for member in members:
            await member.stop(grace=None)
