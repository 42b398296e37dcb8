"""Every package's public API: ``__all__`` names what exists, sorted the way ruff sorts it (RUF022)."""

from __future__ import annotations

import importlib
import inspect

import pytest

PACKAGES = [
    "agentrt.client",
    "agentrt.plugins.demo_tools",
    "agentrt.server",
    "agentrt.server.api",
    "agentrt.server.auth",
    "agentrt.server.config",
    "agentrt.server.core",
    "agentrt.server.engine",
    "agentrt.server.events",
    "agentrt.server.models",
    "agentrt.server.policies",
    "agentrt.server.store",
    "agentrt.server.telemetry",
    "agentrt.server.tools",
    "agentrt.testing",
    "agentrt.toolhost",
    "agentrt.toolhost.mcp",
    "agentrt.toolhost.metadata",
    "agentrt.toolhost.security",
]


def _ruff_order(name: str) -> tuple[int, str]:
    # SCREAMING_CASE first, then CamelCase, then the rest (isort-style, as RUF022 wants).
    if name.isupper() or (name.upper() == name and "_" in name):
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


@pytest.mark.parametrize("package", PACKAGES)
def test_all_is_complete_and_sorted(package: str) -> None:
    module = importlib.import_module(package)
    exported = list(module.__all__)
    assert len(exported) == len(set(exported)), "duplicates in __all__"
    missing = [name for name in exported if not hasattr(module, name)]
    assert missing == []
    assert exported == sorted(exported, key=_ruff_order)
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not inspect.ismodule(value)
        and name != "annotations"
        # Only what the package defines; a plugin's imports (typing, SDK markers) are not its API.
        and str(getattr(value, "__module__", package)).startswith(package)
    }
    assert sorted(public - set(exported)) == [], "public names missing from __all__"
