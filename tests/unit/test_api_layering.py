"""The API's shape: it reaches the engine only through its public facade, and the servicer decides
nothing from a run's log (people's decisions are decided by the core against the run's row)."""

from __future__ import annotations

import ast
from pathlib import Path

import agentrt.server.api as api_package
import agentrt.server.core as core
import agentrt.server.engine as engine_package
import agentrt.server.store as store_package

API = Path(api_package.__file__).parent
SERVICER = API / "_servicer.py"
ENGINE = "agentrt.server.engine"
# What reads a run's log (or folds it): the store's event and signal reads, the fold, the decoder.
LOG_READERS = {
    "read_events",
    "read_page",
    "read_run_and_page",
    "read_signals",
    "read_checkpoint",
    "replay",
    "decode_event",
    "decode_signal",
    "restore_checkpoint",
}


def engine_imports(tree: ast.AST) -> list[str]:
    """Modules of the engine package ``tree`` imports, and names it imports from the facade."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(ENGINE):
            if node.module != ENGINE:
                found.append(node.module)
            else:
                found += [f"{ENGINE}:{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith(ENGINE)]
    return found


def log_reads(tree: ast.AST) -> list[str]:
    """Log-reading names ``tree`` calls (as a function or a method) or imports."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            if name in LOG_READERS:
                found.append(f"calls {name} (line {node.lineno})")
        elif isinstance(node, ast.ImportFrom):
            found += [f"imports {a.name}" for a in node.names if a.name in LOG_READERS]
    return found


def test_the_api_imports_only_the_engines_facade() -> None:
    public = set(engine_package.__all__)
    offenders: list[str] = []
    for path in sorted(API.glob("*.py")):
        for name in engine_imports(ast.parse(path.read_text())):
            module, _, imported = name.partition(":")
            if module != ENGINE or imported not in public:
                offenders.append(f"{path.name}: {name}")
    assert offenders == []


def test_the_servicer_reads_no_run_log() -> None:
    assert log_reads(ast.parse(SERVICER.read_text())) == []


def test_the_guards_see_what_they_guard_against() -> None:
    """The checks above would fail on the code this change removed from the servicer."""
    old = ast.parse(
        "from agentrt.server.engine._tool_step import ToolStep\n"
        "import agentrt.server.engine._run\n"
        "from agentrt.server.engine import Engine, not_exported\n"
        "from agentrt.server.core import replay\n"
        "async def f(self, record):\n"
        "    stored = await self.store.read_events(record.run_id, limit=100_000)\n"
        "    return replay(record.run_id, [decode_event(e.type, e.payload) for e in stored])\n"
    )
    assert set(engine_imports(old)) == {
        f"{ENGINE}._tool_step",
        f"{ENGINE}._run",
        f"{ENGINE}:Engine",
        f"{ENGINE}:not_exported",
    }
    assert {r.split(" (")[0] for r in log_reads(old)} == {
        "imports replay",
        "calls replay",
        "calls read_events",
        "calls decode_event",
    }
    # Every name guarded is one the store or the core has (a rename would blind the guard).
    store_methods = {name for name in dir(store_package.Store) if not name.startswith("_")}
    known = store_methods | set(core.__all__) | set(store_package.__all__)
    assert known >= LOG_READERS
