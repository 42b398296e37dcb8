"""Wheels of every distribution, built once per session, and fresh venvs that install them.

These tests install from the configured package index (pip's own settings), one venv per wheel
under test. They are marked ``packaging`` (``pytest -m packaging``) and run in CI like the rest.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Source folder -> distribution name.
DISTRIBUTIONS = {
    "proto": "agentrt-proto",
    "tool_host": "agentrt-toolhost",
    "tool_host/mcp": "agentrt-toolhost-mcp",
    "clients": "agentrt-client",
    "runtime_server": "agentrt-server",
    "plugins": "agentrt-demo",
    "testing": "agentrt-testing",
}
#: What only the runtime server needs; neither a plugin author nor a caller installs it.
SERVER_ONLY = {
    "sqlalchemy",
    "alembic",
    "psycopg",
    "psycopg-binary",
    "opentelemetry-sdk",
    "opentelemetry-api",
    "jsonschema",
    "httpx",
    "pyjwt",
    "agentrt-server",
    "agentrt-demo",
}


def _pip(python: Path | str, *args: str, timeout: float = 600) -> str:
    done = subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert done.returncode == 0, f"pip {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="session")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding one freshly built wheel per distribution."""
    out = tmp_path_factory.mktemp("wheels")
    # Build from clean copies: setuptools reuses build/ between builds, and stale files there would
    # end up in the wheel; the checkout also stays free of build output.
    sources = tmp_path_factory.mktemp("sources")
    for folder in DISTRIBUTIONS:
        ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
        # dirs_exist_ok: tool_host/mcp was copied with tool_host already (a nested distribution).
        shutil.copytree(ROOT / folder, sources / folder, ignore=ignore, dirs_exist_ok=True)
    # No build isolation: the dev venv has setuptools, and the build stays offline and quick.
    _pip(
        sys.executable,
        "wheel",
        "--quiet",
        "--no-deps",
        "--no-build-isolation",
        "--wheel-dir",
        str(out),
        *(str(sources / folder) for folder in DISTRIBUTIONS),
    )
    built = sorted(p.name for p in out.glob("*.whl"))
    assert len(built) == len(DISTRIBUTIONS), built
    return out


@pytest.fixture(scope="session")
def example_plugin_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of the third-party plugin example, plugins/example_distribution."""
    out = tmp_path_factory.mktemp("example-wheel")
    source = tmp_path_factory.mktemp("example-source") / "example_distribution"
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    shutil.copytree(ROOT / "plugins" / "example_distribution", source, ignore=ignore)
    _pip(
        sys.executable,
        "wheel",
        "--quiet",
        "--no-deps",
        "--no-build-isolation",
        "--wheel-dir",
        str(out),
        str(source),
    )
    (wheel,) = out.glob("acme_greeting-*.whl")
    return wheel


def make_venv(where: Path, wheels: Path, *requirements: str) -> Path:
    """A fresh venv (no system site-packages) with ``requirements`` installed; returns its python."""
    venv.create(where, with_pip=True, clear=True)
    python = where / "bin" / "python"
    _pip(python, "install", "--quiet", "--find-links", str(wheels), *requirements)
    return python


def installed(python: Path) -> set[str]:
    """Normalized names of the distributions installed in the venv of ``python``."""
    listed = json.loads(_pip(python, "list", "--format=json"))
    return {str(item["name"]).lower().replace("_", "-") for item in listed}
