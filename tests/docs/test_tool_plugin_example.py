"""The tool plugin guide's example, as a reader would use it (issue 20: docs/examples/tool_plugin).

The example is copied into a fresh folder, built and installed like any package (into a folder
of its own on PYTHONPATH, so this venv stays as it was), and its own tests run: they start a real
tool host process that finds the plugin through its ``agentrt.tools`` entry point.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "tool_plugin"


def test_the_tool_plugin_example_installs_and_passes_its_own_tests(tmp_path: Path) -> None:
    package = tmp_path / "acme-notes"
    shutil.copytree(EXAMPLE, package, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(package),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert (site / "acme_notes" / "__init__.py").is_file()
    env = os.environ | {"PYTHONPATH": str(site)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=package,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "4 passed" in done.stdout
