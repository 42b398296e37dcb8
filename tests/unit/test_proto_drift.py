"""Generated protobuf code matches proto/ and the contract passes buf (R3.6)."""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUF = ["npx", "--yes", "@bufbuild/buf@1.75.0"]


def _diff(a: Path, b: Path) -> list[str]:
    cmp = filecmp.dircmp(a, b, ignore=["__pycache__"])
    out = [f"only in committed: {n}" for n in cmp.left_only] + [f"only in fresh: {n}" for n in cmp.right_only]
    out += [f"differs: {n}" for n in cmp.diff_files]
    for name in cmp.common_dirs:
        out += _diff(a / name, b / name)
    return out


def test_generated_package_matches_proto(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "proto" / "generate.py"), "--out", str(tmp_path)], check=True)
    package = Path("agentrt") / "proto"
    assert _diff(ROOT / "proto" / "src" / package, tmp_path / package) == [], "run `make proto` and commit"


def _buf(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("npx") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("npx (Node.js) is required under CI=true to run buf")
        pytest.skip("npx not installed")
    return subprocess.run([*BUF, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_buf_lint_and_format_are_clean() -> None:
    lint = _buf("lint")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fmt = _buf("format", "-d", "--exit-code")
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr
