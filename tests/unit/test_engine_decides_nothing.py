"""The I/O shell carries out the core's verdicts and never re-decides them (§11.10).

No module of the engine or the tool router classifies an error by its text, and no engine module
does its own deadline arithmetic or asks whether a retry fits: ``core/_attempts.py`` and
``core/_deadline.py`` hold the one copy. The step executors stay the size of an activity handler.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import agentrt.server.engine as engine_package
import agentrt.server.tools as tools_package
from agentrt.server.engine._model_step import ModelStep
from agentrt.server.engine._tool_step import ToolStep

ENGINE = Path(engine_package.__file__).parent
SHELL = sorted([*ENGINE.glob("*.py"), *Path(tools_package.__file__).parent.glob("*.py")])

# A string literal tested for membership in something that holds a message: text classification.
TEXT_TEST = re.compile(
    r"""["'][^"'\n]*["']\s+(?:not\s+)?in\s+[\w.()]*(?:message|detail|text|str\(|reason|error)"""
)
# Time left, or a comparison with a deadline: the core's job.
DEADLINE_MATH = re.compile(
    r"deadline\w*\s*-(?!>)|-\s*[\w.]*deadline|deadline\w*\s*[<>]=?|[<>]=?\s*[\w.()]*deadline"
)
CORE_ONLY_CALLS = ("retry_fits(", "call_budget(", "call_timeout_s(", "backoff_delay_s(")


def code_lines(path: Path) -> list[tuple[int, str]]:
    """Lines of code without comments and docstrings."""
    tree = ast.parse(path.read_text())
    docstrings = {
        n.body[0].lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
        and isinstance(n.body[0].value.value, str)
    }
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and node.lineno in docstrings and node.end_lineno is not None:
            skip |= set(range(node.lineno, node.end_lineno + 1))
    lines = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        code = line.split("#", 1)[0] if "#" in line and not line.lstrip().startswith(("'", '"')) else line
        if number not in skip and code.strip():
            lines.append((number, code))
    return lines


@pytest.mark.parametrize("path", SHELL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_error_is_classified_by_its_text(path: Path) -> None:
    found = [f"{path.name}:{n}: {line.strip()}" for n, line in code_lines(path) if TEXT_TEST.search(line)]
    assert not found, "text matching decides an outcome:\n" + "\n".join(found)


@pytest.mark.parametrize("path", sorted(ENGINE.glob("*.py")), ids=lambda p: p.name)
def test_no_deadline_arithmetic_or_retry_fits_in_the_engine(path: Path) -> None:
    found = [
        f"{path.name}:{n}: {line.strip()}"
        for n, line in code_lines(path)
        if DEADLINE_MATH.search(line) or any(call in line for call in CORE_ONLY_CALLS)
    ]
    assert not found, "decide this in core/_attempts.py or core/_deadline.py:\n" + "\n".join(found)


def test_the_guards_see_what_they_guard_against(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "def f(message, deadline_s, now):\n"
        '    if "timeout" in message:\n'
        "        return deadline_s - now\n"
        "    return retry_fits(now_s=now)\n"
    )
    lines = code_lines(bad)
    assert any(TEXT_TEST.search(line) for _, line in lines)
    assert any(DEADLINE_MATH.search(line) for _, line in lines)
    assert any("retry_fits(" in line for _, line in lines)


@pytest.mark.parametrize("method", [ToolStep.run_call, ModelStep.run_step], ids=lambda m: m.__qualname__)
def test_the_step_executors_are_the_size_of_an_activity_handler(method: object) -> None:
    source = inspect.getsource(method)  # type: ignore[arg-type]
    statements = [
        line for line in source.splitlines()[1:] if line.strip() and not line.strip().startswith("#")
    ]
    assert len(statements) <= 50, f"{len(statements)} lines"
