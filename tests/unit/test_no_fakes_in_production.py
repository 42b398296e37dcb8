"""Test fakes live only in agentrt.testing, and no production module imports it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import agentrt.testing
from agentrt.client import _demo as client_demo
from agentrt.server.api import _server as server_api
from agentrt.testing import _runtime

ROOT = Path(__file__).resolve().parents[2]
#: The source trees of every distribution that ships product code.
PRODUCTION = [
    "proto/src",
    "tool_host/src",
    "tool_host/mcp/src",
    "clients/src",
    "runtime_server/src",
    "plugins/src",
]


def _imported_modules(path: Path) -> set[str]:
    """Every module an ``import`` or ``from ... import`` in the file names, resolved to absolute."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # relative: resolve against the file's package
                src = next(p for p in path.parents if p.name == "src")
                parts = list(path.relative_to(src).with_suffix("").parts)
                base = parts[: len(parts) - node.level]
                module = ".".join([*base, module] if module else base)
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _production_files() -> list[Path]:
    files = [f for tree in PRODUCTION for f in sorted((ROOT / tree).rglob("*.py"))]
    assert len(files) > 100, "the production trees moved; update PRODUCTION"
    return files


def test_no_production_module_imports_a_test_fake() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(m for m in _imported_modules(path) if _is_test_support(m))
        for path in _production_files()
    }
    assert {name: mods for name, mods in offenders.items() if mods} == {}


def _is_test_support(module: str) -> bool:
    parts = module.split(".")
    return module.startswith("agentrt.testing") or "testing" in parts or "_fake_server" in parts


def test_fakes_are_only_in_agentrt_testing() -> None:
    fakes = [
        str(path.relative_to(ROOT))
        for path in _production_files()
        if path.stem in {"testing", "_fake_server", "conftest"} or path.stem.startswith("fake")
    ]
    assert fakes == []


@pytest.mark.parametrize(
    "module", ["agentrt.server._main", "agentrt.toolhost._cli", "agentrt.client.cli", "agentrt.server.api"]
)
def test_starting_a_process_does_not_load_agentrt_testing(module: str) -> None:
    code = f"import sys, {module}; print('agentrt.testing' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_the_runtime_fixture_waits_for_the_runtimes_own_ready_line() -> None:
    # agentrt.testing does not import the server (it installs without it): the constants agree.
    assert _runtime.READY_PREFIX == server_api.READY_PREFIX == client_demo.READY_PREFIX
    assert "spawn_runtime" in agentrt.testing.__all__
