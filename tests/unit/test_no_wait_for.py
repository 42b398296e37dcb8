"""No ``asyncio.wait_for`` in our packages: on Python 3.11 it returns the result and drops a cancel
that lands as the awaited call completes (CPython gh-86296). A dropped cancel is a run that does
not stop, a drain that waits out its deadline, a tool slot polled for until the call's deadline.
``asyncio.timeout`` has no such race; use it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = [
    "runtime_server/src",
    "tool_host/src",
    "tool_host/mcp/src",
    "clients/src",
    "testing/src",
    "plugins/src",
]


def wait_for_calls(source: str) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "wait_for"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "asyncio"
    ]


def test_the_check_finds_a_wait_for() -> None:
    assert wait_for_calls("import asyncio\nasync def f(c):\n    await asyncio.wait_for(c, 1)\n") == [3]
    assert wait_for_calls("async def f(routes):\n    await routes.wait_for('t', 1)\n") == []


def test_no_package_of_ours_calls_asyncio_wait_for() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if "/proto/" not in str(path)
        for line in wait_for_calls(path.read_text())
    ]
    assert found == [], "use asyncio.timeout (the module's docstring says why)"
