"""The demo plugins are opt-in (distribution agentrt-demo): ``--demo`` without them says what to install."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from agentrt.server import _demo, _main


def test_demo_plugins_are_found_when_installed() -> None:
    # The dev workspace installs agentrt-demo (make), so the demo works there.
    assert _demo.demo_plugins_installed()


@pytest.mark.parametrize("missing", [_demo.DEMO_PLUGINS, "agentrt.plugins"])
def test_demo_without_the_demo_distribution_exits_2_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], missing: str
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> Any:
        if name == missing:
            if missing == "agentrt.plugins":  # as when the parent package is absent
                raise ModuleNotFoundError(f"No module named {name!r}")
            return None
        if missing == "agentrt.plugins" and name.startswith("agentrt.plugins"):
            raise ModuleNotFoundError("No module named 'agentrt.plugins'")
        return real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert _main.main(["--demo", "--listen", "127.0.0.1:0"]) == 2
    assert "pip install agentrt-demo" in capsys.readouterr().err
