"""``[redis]``: each bad value is a clear config error that never echoes a secret; the files it names."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from agentrt.server.api._fanout import REDIS_MISSING, build_bus, check_redis
from agentrt.server.config import ConfigError, RedisConfig, load_settings
from agentrt.server.core import LinkChange, link_change, reconnect_delay_s
from agentrt.server.events import EventBus, RedisEventBus
from agentrt.server.events._redis_files import RedisSetupError, check_tls_files, read_password
from agentrt.server.events._wire import decode_run_message, decode_wake, encode_run_message, encode_wake
from agentrt.server.store import StoredEvent
from agentrt.toolhost.security import generate_dev_pki


def settings_error(env: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as caught:
        load_settings(env=env)
    return str(caught.value)


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"AGENTRT_REDIS__URL": "http://127.0.0.1:6379"}, "redis:// or rediss://"),
        ({"AGENTRT_REDIS__URL": "redis://"}, "names no host"),
        ({"AGENTRT_REDIS__URL": "redis://127.0.0.1:6379/zero"}, "database number"),
        ({"AGENTRT_REDIS__URL": "redis://127.0.0.1:6379/0?ssl=true"}, "no query"),
        ({"AGENTRT_REDIS__URL": "redis://127.0.0.1:99999"}, "not a valid URL"),
        ({"AGENTRT_REDIS__URL": "redis://127.0.0.1", "AGENTRT_REDIS__KEY_PREFIX": "a b"}, "key_prefix"),
        ({"AGENTRT_REDIS__URL": "redis://127.0.0.1", "AGENTRT_REDIS__KEY_PREFIX": ""}, "key_prefix"),
        ({"AGENTRT_REDIS__PASSWORD_ENV": "NOT-A-NAME"}, "not an environment variable name"),
        (
            {"AGENTRT_REDIS__PASSWORD_ENV": "PW", "AGENTRT_REDIS__PASSWORD_FILE": "/pw"},
            "password_file or password_env, not both",
        ),
        ({"AGENTRT_REDIS__URL": "redis://h", "AGENTRT_REDIS__CA_FILE": "/ca.pem"}, "need a rediss:// url"),
        ({"AGENTRT_REDIS__URL": "rediss://h", "AGENTRT_REDIS__CERT_FILE": "/c.pem"}, "go together"),
        ({"AGENTRT_REDIS__RECONNECT_BASE_S": "10", "AGENTRT_REDIS__RECONNECT_CAP_S": "1"}, "reconnect_cap_s"),
        ({"AGENTRT_REDIS__COMMAND_TIMEOUT_S": "0"}, "command_timeout_s"),
        ({"AGENTRT_REDIS__SENTINEL": "yes"}, "sentinel"),
    ],
)
def test_bad_values_are_clear_config_errors(env: dict[str, str], says: str) -> None:
    assert says in settings_error(env)


@pytest.mark.parametrize("url", ["redis://:hunter2@127.0.0.1:6379", "rediss://agentrt:hunter2@h:6380/0"])
def test_a_password_in_the_url_is_refused_without_being_echoed(url: str) -> None:
    message = settings_error({"AGENTRT_REDIS__URL": url})
    assert "may not carry a user or password" in message
    assert "hunter2" not in message


def test_the_default_is_off_and_keeps_the_in_process_bus() -> None:
    settings = load_settings(env={})
    assert not settings.redis.enabled
    assert type(build_bus(settings)) is EventBus
    on = load_settings(env={"AGENTRT_REDIS__URL": "redis://127.0.0.1:6379/2"})
    assert on.redis.enabled and not on.redis.tls and on.redis.key_prefix == "agentrt:"
    assert isinstance(build_bus(on), RedisEventBus)


def test_the_password_from_a_file_or_a_variable(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    assert read_password(RedisConfig(password_file=str(secret))) == "s3cret"
    assert read_password(RedisConfig(password_env="PW"), env={"PW": "fromenv"}) == "fromenv"
    assert read_password(RedisConfig()) is None


def test_password_sources_that_cannot_be_used(tmp_path: Path) -> None:
    with pytest.raises(RedisSetupError, match="cannot read password_file"):
        read_password(RedisConfig(password_file=str(tmp_path / "missing")))
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(RedisSetupError, match="is empty"):
        read_password(RedisConfig(password_file=str(empty)))
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(RedisSetupError, match="not UTF-8"):
        read_password(RedisConfig(password_file=str(binary)))
    with pytest.raises(RedisSetupError, match="PW is not set"):
        read_password(RedisConfig(password_env="PW"), env={})
    # check_redis maps each to a ConfigError at start.
    with pytest.raises(ConfigError, match="redis: password_env PW"):
        check_redis(RedisConfig(url="redis://h", password_env="PW_UNSET_FOR_SURE_123"))


def test_rediss_builds_a_tls_context_from_the_files(tmp_path: Path) -> None:
    pki = generate_dev_pki(tmp_path / "pki")
    cert, key = pki.client_files["agentrt-runtime"]
    config = RedisConfig(
        url="rediss://127.0.0.1:6380", ca_file=str(pki.ca_file), cert_file=str(cert), key_file=str(key)
    )
    context = check_tls_files(config)
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
    assert check_tls_files(RedisConfig(url="redis://h")) is None


def test_tls_files_that_cannot_be_loaded(tmp_path: Path) -> None:
    pki = generate_dev_pki(tmp_path / "pki")
    with pytest.raises(RedisSetupError, match="cannot load ca_file"):
        check_tls_files(RedisConfig(url="rediss://h", ca_file=str(tmp_path / "nope.pem")))
    with pytest.raises(RedisSetupError, match="cannot load cert_file"):
        check_tls_files(
            RedisConfig(
                url="rediss://h",
                ca_file=str(pki.ca_file),
                cert_file=str(pki.ca_file),
                key_file=str(pki.ca_file),
            )
        )


def test_a_missing_redis_package_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "redis" else real(name, *a)
    )
    with pytest.raises(ConfigError) as caught:
        check_redis(RedisConfig(url="redis://h"))
    assert str(caught.value) == REDIS_MISSING


def test_link_changes_are_transitions_only() -> None:
    assert link_change(was_up=None, up=False) is LinkChange.WENT_DOWN
    assert link_change(was_up=None, up=True) is LinkChange.CAME_UP
    assert link_change(was_up=True, up=False) is LinkChange.WENT_DOWN
    assert link_change(was_up=False, up=False) is None
    assert link_change(was_up=True, up=True) is None


def test_reconnect_delays_grow_are_capped_and_never_zero() -> None:
    delays = [reconnect_delay_s(failures=n, base_s=0.1, cap_s=5.0, rand=0.999) for n in range(1, 12)]
    assert delays == sorted(delays) and delays[-1] <= 5.0 and delays[0] < 0.11
    assert reconnect_delay_s(failures=3, base_s=0.1, cap_s=5.0, rand=0.0) == pytest.approx(0.01)


def test_wire_round_trip_and_foreign_messages() -> None:
    items = [
        StoredEvent("r", 4, "tool.started", '{"big": "not sent"}', 9),
        StoredEvent("r", 0, "model.text.delta", "{}", 7),
    ]
    data = encode_run_message("me", "r", items, after_seq=4)
    assert data is not None and b"not sent" not in data
    message = decode_run_message(data)
    assert message is not None and message.origin == "me" and message.after_seq == 4
    assert [(i.seq, i.type, i.payload) for i in message.items] == [(4, "", ""), (0, "model.text.delta", "{}")]
    assert encode_run_message("me", "r", [], after_seq=None) is None
    wake = decode_wake(encode_wake("me", "r"))
    assert wake is not None and (wake.origin, wake.run_id) == ("me", "r")
    for junk in (
        b"",
        b"[]",
        b"{}",
        b'{"o": 1, "r": "r", "a": null, "i": []}',
        b'{"o":"a","r":"r","a":-1,"i":[]}',
        b'{"o":"a","r":"r","a":null,"i":[true]}',
        b'{"o":"a","r":"r","a":null,"i":[["t",1,2]]}',
        b"\xff",
    ):
        assert decode_run_message(junk) is None
        assert decode_wake(junk) is None


def test_a_password_given_directly_is_refused_without_being_echoed() -> None:
    message = settings_error({"AGENTRT_REDIS__URL": "redis://h", "AGENTRT_REDIS__PASSWORD": "hunter2"})
    assert "redis.password" in message and "hunter2" not in message
