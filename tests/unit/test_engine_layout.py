"""The engine's shape: no import cycles among its modules, step executors that see only their
context and ports, and every attribute of an engine class set first in its constructor."""

from __future__ import annotations

import ast
from pathlib import Path

import agentrt.server.engine as engine_package

ENGINE = Path(engine_package.__file__).parent
PREFIX = "agentrt.server.engine."
# What a step executor may import from the engine: its context, ports and shared helpers.
STEP_MODULES = ("_tool_step", "_model_step", "_approval_step", "_finalize", "_payload_step")
SHELL_MODULES = {"_driver", "_engine", "_contain"}


def engine_imports() -> dict[str, set[str]]:
    """Module -> engine modules it imports (TYPE_CHECKING imports and function-level ones too)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(ENGINE.glob("*.py")):
        tree = ast.parse(path.read_text())
        found: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PREFIX):
                found.add(node.module.removeprefix(PREFIX))
            elif isinstance(node, ast.Import):
                found |= {a.name.removeprefix(PREFIX) for a in node.names if a.name.startswith(PREFIX)}
        graph[path.stem] = found
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a path, or None."""
    visiting: list[str] = []
    done: set[str] = set()

    def visit(module: str) -> list[str] | None:
        if module in visiting:
            return [*visiting[visiting.index(module) :], module]
        if module in done:
            return None
        visiting.append(module)
        for target in sorted(graph.get(module, ())):
            if (cycle := visit(target)) is not None:
                return cycle
        visiting.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        if (cycle := visit(module)) is not None:
            return cycle
    return None


def test_engine_modules_import_each_other_without_a_cycle() -> None:
    graph = engine_imports()
    assert {"_driver", "_run", "_ports", "_tool_step"} <= graph.keys()
    assert find_cycle(graph) is None


def test_the_cycle_check_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_step_executors_never_import_the_driver_or_the_engine() -> None:
    graph = engine_imports()
    for module in STEP_MODULES:
        assert not graph[module] & SHELL_MODULES, f"{module} imports {graph[module] & SHELL_MODULES}"


def test_engine_classes_set_every_attribute_in_their_constructor() -> None:
    late: list[str] = []
    for path in sorted(ENGINE.glob("*.py")):
        for cls in (n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)):
            methods = [n for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
            init = next((m for m in methods if m.name == "__init__"), None)
            declared = {
                n.target.id
                for n in cls.body
                if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
            }
            in_init = _self_assignments(init) if init is not None else set()
            for method in methods:
                if method is init:
                    continue
                for name in _self_assignments(method) - in_init - declared:
                    late.append(f"{path.name}:{cls.name}.{name} first set in {method.name}")
    assert late == []


def _self_assignments(function: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(function):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        for target in targets:
            for leaf in ast.walk(target):
                if (
                    isinstance(leaf, ast.Attribute)
                    and isinstance(leaf.value, ast.Name)
                    and leaf.value.id == "self"
                    and isinstance(leaf.ctx, ast.Store)
                ):
                    names.add(leaf.attr)
    return names


def test_the_testing_package_uses_only_the_engines_public_facade() -> None:
    """agentrt.testing fakes the engine's public ports; a private module is no contract to fake."""
    import agentrt.testing as testing_package

    found = []
    for path in sorted(Path(testing_package.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            found += [f"{path.name}: {n}" for n in names if n.startswith(PREFIX + "_")]
    assert not found, found


def test_step_executors_see_only_the_settings_they_use() -> None:
    """A step gets frozen run details, never the runtime's whole configuration (STYLE §11)."""
    import dataclasses

    from agentrt.server.engine._details import RunDetails, StepSettings

    assert dataclasses.fields(RunDetails) and RunDetails.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert StepSettings.__dataclass_params__.frozen  # type: ignore[attr-defined]
    names = {f.name for f in dataclasses.fields(StepSettings)}
    assert not names & {"db_url", "auth", "tls", "listen", "tool_hosts", "agents", "grants"}
    for module in STEP_MODULES:
        source = (ENGINE / f"{module}.py").read_text()
        assert "ports.settings" not in source, module
