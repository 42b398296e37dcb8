"""The agentrt CLI as an operator's tool: ``--version`` lists every agentrt distribution, and the
commands it hands on (serve, toolhost, prune, migrate) name themselves ``agentrt COMMAND``."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentrt.client import cli
from agentrt.toolhost._cli import main as toolhost_main


def test_version_prints_every_installed_agentrt_distribution_one_per_line() -> None:
    # The console script itself, as an operator runs it.
    script = Path(sys.executable).with_name("agentrt")
    done = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    expected = {
        f"{name} {importlib.metadata.version(name)}"
        for name in (
            "agentrt-client",
            "agentrt-server",
            "agentrt-toolhost",
            "agentrt-proto",
            "agentrt-testing",
        )
    }
    assert expected <= set(lines)
    assert lines == sorted(lines) and all(line.startswith("agentrt") for line in lines)
    assert all(len(line.split(" ")) == 2 for line in lines)


def test_installed_versions_keeps_agentrt_names_once_sorted(monkeypatch: pytest.MonkeyPatch) -> None:
    def dist(name: str, version: str) -> SimpleNamespace:
        return SimpleNamespace(metadata={"Name": name}, version=version)

    found = [
        dist("agentrt-toolhost", "1.2.0"),
        dist("grpcio", "1.70.0"),
        dist("agentrt-client", "1.1.0"),
        dist("agentrt-client", "0.0.1"),  # a stale copy later on sys.path
        dist("not-agentrt", "9"),
    ]
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: iter(found))
    assert cli.installed_versions() == [("agentrt-client", "1.1.0"), ("agentrt-toolhost", "1.2.0")]


@pytest.mark.parametrize("command", ["serve", "toolhost", "prune", "migrate"])
def test_help_of_a_handed_on_command_names_agentrt_command(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: agentrt {command} ")
    assert "python -m" not in out


@pytest.mark.parametrize(
    ("argv0", "prog"),
    [
        ("/venv/lib/python3.11/site-packages/agentrt/toolhost/__main__.py", "python -m agentrt.toolhost"),
        ("/venv/bin/agentrt-toolhost", "agentrt-toolhost"),
    ],
)
def test_tool_host_help_names_how_it_was_started(
    argv0: str, prog: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", [argv0, "--help"])
    assert toolhost_main(["--help"]) == 0
    assert capsys.readouterr().out.startswith(f"usage: {prog} ")


def test_a_usage_error_of_a_handed_on_command_names_it_too(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["toolhost", "--no-such-flag"]) == 2
    assert "agentrt toolhost: error: unrecognized arguments: --no-such-flag" in capsys.readouterr().err
