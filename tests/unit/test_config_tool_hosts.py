"""``[[tool_hosts]]`` entries: one address, a pool of addresses, a DNS name, or a spawned child."""

from __future__ import annotations

import pytest

from agentrt.server.config import ConfigError, ToolHostConfig, load_settings


def host(**fields: object) -> ToolHostConfig:
    return ToolHostConfig.model_validate({"name": "h", **fields})


def test_a_pool_of_addresses_is_one_ipv4_or_ipv6_target() -> None:
    pool = host(addresses=["127.0.0.1:5001", "127.0.0.1:5002"])
    assert pool.target == "ipv4:127.0.0.1:5001,127.0.0.1:5002" and pool.pooled
    assert pool.host_names == ["127.0.0.1", "127.0.0.1"]
    six = host(addresses=["[::1]:5001", "[::1]:5002"])
    assert six.target == "ipv6:[::1]:5001,[::1]:5002" and six.host_names == ["::1", "::1"]


def test_a_dns_name_is_a_pool_and_a_plain_address_is_not() -> None:
    dns = host(address="dns:///tools.internal:5001")
    assert dns.pooled and dns.target == "dns:///tools.internal:5001" and dns.host_names == ["tools.internal"]
    plain = host(address="127.0.0.1:5001")
    assert not plain.pooled and plain.target == "127.0.0.1:5001"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "give exactly one of address, addresses or spawn = true"),
        ({"address": "127.0.0.1:1", "addresses": ["127.0.0.1:2"]}, "give exactly one of address, addresses"),
        ({"addresses": ["127.0.0.1:1"], "spawn": True}, "give exactly one of address, addresses"),
        ({"address": "127.0.0.1"}, "is not HOST:PORT or dns:///NAME:PORT"),
        ({"address": "dns:///tools.internal"}, "is not HOST:PORT or dns:///NAME:PORT"),
        ({"addresses": ["tools-a:5001"]}, 'give address = "dns:///NAME:PORT"'),
        ({"addresses": ["127.0.0.1:x"]}, "is not IP:PORT"),
        ({"addresses": ["::1:5001"]}, "[V6]:PORT for IPv6"),
        ({"addresses": ["127.0.0.1:1", "[::1]:2"]}, "IPv4 or IPv6 members, not both"),
        ({"addresses": ["127.0.0.1:1", "127.0.0.1:1"]}, "addresses repeat"),
        ({"addresses": ["127.0.0.1:1", "127.0.0.2:1"], "ca_file": "ca.pem"}, "need server_name"),
        ({"address": "127.0.0.1:1", "relist_s": 0}, "relist_s"),
    ],
)
def test_a_bad_entry_is_refused_with_a_clear_message(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as caught:
        host(**fields)
    assert message in str(caught.value)


def test_the_message_names_the_entry_in_the_file() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={"AGENTRT_TOOL_HOSTS": '[{"name": "pool", "addresses": ["tools-a:1"]}]'})
    assert "tool_hosts.0" in str(caught.value) and "is not IP:PORT" in str(caught.value)
