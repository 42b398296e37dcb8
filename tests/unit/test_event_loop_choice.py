"""The event loop choice of both servers (agentrt.toolhost._loop): auto, uvloop, asyncio."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from types import ModuleType

import pytest

from agentrt.server.config import ConfigError, Settings, load_settings
from agentrt.toolhost._loop import EVENT_LOOP_CHOICES, EventLoopError, LoopPlan, resolve_loop, run_on

EXTRA = "agentrt-server[uvloop]"


def _not_importable(name: str) -> ModuleType:
    raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def _fake_uvloop(name: str) -> ModuleType:
    # Stands for an installed uvloop where the real one has no build (Windows).
    assert name == "uvloop"
    module = ModuleType("uvloop")
    module.new_event_loop = asyncio.new_event_loop  # type: ignore[attr-defined]
    module.__version__ = "9.9.9"  # type: ignore[attr-defined]
    return module


def _must_not_import(name: str) -> ModuleType:
    raise AssertionError(f"asyncio was configured, yet {name} was imported")


def test_the_choices_are_the_settings_literal() -> None:
    assert EVENT_LOOP_CHOICES == ("auto", "uvloop", "asyncio")
    assert Settings().event_loop == "auto"


def test_auto_takes_uvloop_when_it_imports() -> None:
    plan = resolve_loop("auto", extra=EXTRA, import_module=_fake_uvloop)
    assert plan == LoopPlan(name="uvloop", factory=asyncio.new_event_loop, detail="uvloop 9.9.9")


def test_auto_falls_back_to_asyncio_when_uvloop_does_not_import() -> None:
    plan = resolve_loop("auto", extra=EXTRA, import_module=_not_importable)
    assert plan == LoopPlan(name="asyncio", factory=None, detail="uvloop not installed")


def test_uvloop_when_it_does_not_import_is_an_error_naming_the_extra() -> None:
    with pytest.raises(EventLoopError) as caught:
        resolve_loop("uvloop", extra=EXTRA, import_module=_not_importable)
    assert caught.value.choice == "uvloop"
    assert "pip install 'agentrt-server[uvloop]'" in str(caught.value)
    assert "No module named 'uvloop'" in str(caught.value)


def test_asyncio_does_not_even_try_uvloop() -> None:
    plan = resolve_loop("asyncio", extra=EXTRA, import_module=_must_not_import)
    assert plan.name == "asyncio" and plan.factory is None


@pytest.mark.parametrize("bad", ["", "uv", "UVLOOP", "trio"])
def test_an_unknown_choice_is_refused_with_the_choices(bad: str) -> None:
    with pytest.raises(EventLoopError, match=r"unknown event loop .*: choose one of auto, uvloop, asyncio"):
        resolve_loop(bad, extra=EXTRA, import_module=_must_not_import)


def test_the_real_uvloop_is_found_by_auto() -> None:
    uvloop = pytest.importorskip("uvloop")
    plan = resolve_loop("auto", extra=EXTRA)
    assert plan.name == "uvloop" and plan.factory is uvloop.new_event_loop
    assert plan.detail == f"uvloop {uvloop.__version__}"


@pytest.mark.parametrize("choice", ["uvloop", "asyncio"])
def test_run_on_runs_the_coroutine_on_that_loop_and_logs_it_once(
    choice: str, caplog: pytest.LogCaptureFixture
) -> None:
    if choice == "uvloop":
        pytest.importorskip("uvloop")
    plan = resolve_loop(choice, extra=EXTRA)

    async def which() -> str:
        await asyncio.sleep(0)
        return type(asyncio.get_running_loop()).__module__

    log = logging.getLogger("agentrt.test_loop")
    with caplog.at_level(logging.INFO, logger=log.name):
        module = run_on(plan, which(), log=log)
    assert module.partition(".")[0] == choice
    lines = [r for r in caplog.records if r.name == log.name]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
    assert lines[0].getMessage().startswith(f"event loop: {choice} (")


def test_run_on_propagates_the_coroutine_error() -> None:
    async def fails() -> None:
        raise LookupError("boom")

    with pytest.raises(LookupError, match="boom"):
        run_on(LoopPlan(name="asyncio", factory=None, detail="test"), fails(), log=logging.getLogger("t"))


def test_the_runtime_setting_reads_its_env_var() -> None:
    assert load_settings(env={"AGENTRT_EVENT_LOOP": "asyncio"}).event_loop == "asyncio"


def test_a_bad_runtime_setting_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"event_loop: Input should be 'auto', 'uvloop' or 'asyncio'"):
        load_settings(env={"AGENTRT_EVENT_LOOP": "libuv"})


def test_the_tool_host_env_var_is_not_a_runtime_setting() -> None:
    # A runtime that spawns its tool hosts passes them its environment; the variable is theirs.
    assert load_settings(env={"AGENTRT_TOOLHOST_EVENT_LOOP": "asyncio"}).event_loop == "auto"


def test_every_tool_host_variable_is_left_to_the_tool_host() -> None:
    # One machine (a systemd host, a dev shell) may set the host's ledger URL next to the runtime's.
    env = {
        "AGENTRT_TOOLHOST_LEDGER_URL": "postgresql://ledger@db/ledger",
        "AGENTRT_TOOLHOST_FAULT": "after_effect",
        "AGENTRT_TOOLHOST_SOMETHING_NEWER": "1",
    }
    assert load_settings(env=env).tool_hosts == []


def test_the_loop_module_imports_no_uvloop_at_import_time() -> None:
    # uvloop is optional: importing the module (both servers do at start) must not need it.
    source = importlib.util.find_spec("agentrt.toolhost._loop")
    assert source is not None and source.origin is not None
    with open(source.origin, encoding="utf-8") as fh:
        assert "import uvloop" not in fh.read()
