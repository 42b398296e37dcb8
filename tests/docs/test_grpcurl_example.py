"""The docs' grpcurl example, run as written (grpcurl from the dev install) against a demo runtime."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from agentrt.testing import spawn_runtime

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "grpcurl" / "inspect.sh"


def test_the_grpcurl_example_lists_runs_and_checks_health(tmp_path: Path) -> None:
    bin_dir = Path(sys.executable).parent  # .venv/bin holds grpcurl
    env = os.environ | {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    with spawn_runtime(["--demo", "--listen", "127.0.0.1:0"], cwd=tmp_path) as runtime:
        done = subprocess.run(
            ["sh", str(EXAMPLE), runtime.address], env=env, capture_output=True, text=True, timeout=120
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "agentrt.runtime.v1.AgentRuntimeService" in done.stdout
    # The demo agent always refunds, over the policy's limit: the stream ends as the run pauses.
    assert '"run_started": {' in done.stdout and '"run_waiting": {' in done.stdout
    assert '"status": "SERVING"' in done.stdout
