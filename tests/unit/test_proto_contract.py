"""The wire contract for polyglot callers: language options, the breaking-change lock, CHANGELOG.

``buf breaking`` runs against ``proto/v1.lock.binpb``, the contract as main last accepted it,
so the check works on a fresh clone (no git history needed) and offline (npx serves the
pinned buf from its cache).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shutil
from pathlib import Path
from types import ModuleType

import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FileDescriptor

ROOT = Path(__file__).resolve().parents[2]
PROTO_ROOT = ROOT / "proto"
# The sources under proto/agentrt/ (proto/src/ holds the copies that ship in agentrt-proto).
PROTO_FILES = sorted(p.relative_to(PROTO_ROOT).as_posix() for p in (PROTO_ROOT / "agentrt").rglob("*.proto"))


def _lock_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("proto_lock", PROTO_ROOT / "lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _needs_npx() -> None:
    if shutil.which("npx") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("npx (Node.js) is required under CI=true to run buf")
        pytest.skip("npx not installed")


def _file_descriptor(path: str) -> FileDescriptor:
    # agentrt/runtime/v1/run.proto is generated as agentrt.proto.runtime.v1.run_pb2.
    module = importlib.import_module(
        "agentrt.proto." + path.removeprefix("agentrt/").removesuffix(".proto").replace("/", ".") + "_pb2"
    )
    descriptor: FileDescriptor = module.DESCRIPTOR
    return descriptor


def _pascal(package: str) -> list[str]:
    return [part[:1].upper() + part[1:] for part in package.split(".")]


@pytest.mark.parametrize("path", PROTO_FILES)
def test_every_proto_file_sets_the_language_options(path: str) -> None:
    descriptor = _file_descriptor(path)
    options = descriptor.GetOptions()
    package = descriptor.package  # e.g. agentrt.runtime.v1
    parts = package.split(".")
    assert options.go_package == f"github.com/agentrt/agentrt/gen/go/{'/'.join(parts)};{parts[1]}v1"
    assert options.java_package == f"dev.{package}"
    assert options.java_multiple_files is True
    assert options.java_outer_classname and options.java_outer_classname.endswith("Proto")
    assert options.csharp_namespace == ".".join(_pascal(package))
    assert options.php_namespace == "\\".join(_pascal(package))
    assert options.ruby_package == "::".join(_pascal(package))
    assert options.objc_class_prefix == "".join(p[0] for p in parts[:2]).upper() + "X"


def test_files_of_one_package_agree_and_outer_classnames_differ() -> None:
    by_package: dict[str, set[tuple[str, ...]]] = {}
    outer: set[tuple[str, str]] = set()
    for path in PROTO_FILES:
        descriptor = _file_descriptor(path)
        o = descriptor.GetOptions()
        key = (o.go_package, o.java_package, o.csharp_namespace, o.php_namespace, o.ruby_package)
        by_package.setdefault(descriptor.package, set()).add(key)
        outer.add((o.java_package, o.java_outer_classname))
    assert all(len(v) == 1 for v in by_package.values()), by_package
    assert len(outer) == len(PROTO_FILES)  # two files with one outer class would clash in Java


def test_the_contract_does_not_break_the_lock_and_the_lock_is_current() -> None:
    _needs_npx()
    lock = _lock_module()
    result = lock.breaking()
    assert result.returncode == 0, result.stdout + result.stderr
    assert lock.current_equals_lock(), "proto/ changed but the lock did not move: run `make proto-lock`"


# Accidental breaks a future change could make; each must fail the check, naming what broke.
BREAKS = {
    "type_change": ("int64 cost_micros = 7;", "double cost_micros = 7;", "cost_micros"),
    "deleted_field": ("  // Handoffs made.\n  int32 handoffs = 6;\n", "", "handoffs"),
    "renumbered": ("StepKind kind = 5;", "StepKind kind = 9;", "kind"),
    "renamed_json": ("string arguments_json = 3;", "string args_json = 3;", "arguments_json"),
    "enum_value_removed": ("  STEP_KIND_CORRECTIVE = 3;\n", "", "STEP_KIND_CORRECTIVE"),
}


@pytest.mark.parametrize("case", sorted(BREAKS))
def test_an_accidental_break_fails_buf_breaking(case: str, tmp_path: Path) -> None:
    _needs_npx()
    old, new, named = BREAKS[case]
    shutil.copy(ROOT / "buf.yaml", tmp_path / "buf.yaml")
    shutil.copytree(PROTO_ROOT / "agentrt", tmp_path / "proto" / "agentrt")
    run_proto = tmp_path / "proto" / "agentrt" / "runtime" / "v1" / "run.proto"
    text = run_proto.read_text()
    assert text.count(old) == 1, f"the {case} mutation no longer applies; update it"
    run_proto.write_text(text.replace(old, new))
    result = _lock_module().breaking(cwd=tmp_path)
    assert result.returncode != 0, f"buf breaking accepted a {case}"
    assert named in result.stdout + result.stderr


def _reserved(path: str) -> list[tuple[str, list[int], list[str]]]:
    """(message, reserved numbers, reserved names) of every message of a file that reserves any."""
    proto = descriptor_pb2.FileDescriptorProto()
    _file_descriptor(path).CopyToProto(proto)
    out = []
    for message in proto.message_type:
        numbers = [n for r in message.reserved_range for n in range(r.start, r.end)]
        if numbers or message.reserved_name:
            out.append((message.name, numbers, list(message.reserved_name)))
    return out


def test_changelog_lists_every_removed_field() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    found = [r for path in PROTO_FILES for r in _reserved(path)]
    assert found, "the v1 break reserved fields; this test lost sight of them"
    for message, numbers, names in found:
        for name in names:
            assert f"{message}.{name}" in changelog, f"CHANGELOG.md does not list {message}.{name}"
        for number in numbers:
            assert re.search(rf"{message}\.\w+`? \(field {number}\b", changelog), (
                f"CHANGELOG.md does not say which field of {message} number {number} was"
            )
