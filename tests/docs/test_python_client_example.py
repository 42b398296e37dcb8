"""The docs' Python client example, run as written against a real demo runtime."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agentrt.testing import spawn_runtime

EXAMPLE = (
    Path(__file__).resolve().parents[2] / "docs" / "examples" / "python_client" / "refund_with_approval.py"
)


def test_the_python_client_example_approves_and_follows_the_run_to_its_end(tmp_path: Path) -> None:
    with spawn_runtime(["--demo", "--listen", "127.0.0.1:0"], cwd=tmp_path) as runtime:
        done = subprocess.run(
            [sys.executable, str(EXAMPLE), runtime.address],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("approving:") for line in lines), done.stdout
    assert lines[-1] == "ended: RUN_PHASE_COMPLETED"
    seqs = [int(line.split()[0]) for line in lines if line.split()[0].isdigit()]
    assert "0 run_waiting" in lines  # the stream-only note that the run paused
    stored = [seq for seq in seqs if seq]
    assert stored == list(range(1, len(stored) + 1)), "an event seen twice, out of order or missed"
    assert "run_ended" in done.stdout
