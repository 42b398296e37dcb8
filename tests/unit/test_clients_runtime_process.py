"""The demo's child-process helper (agentrt.client._demo.RuntimeProcess) with small stand-in children.

The demo itself (a real runtime child) is tested end to end elsewhere; these cover the
helper's error paths: early exit, silence, and a child that ignores SIGTERM.
"""

from __future__ import annotations

import signal
import sys
import textwrap
import time

import pytest

from agentrt.client._demo import READY_PREFIX, RuntimeProcess, RuntimeStartError


def child(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def test_ready_line_gives_the_target_and_sigterm_stops_the_child() -> None:
    runtime = RuntimeProcess(
        child(f"""
            import sys, time
            print("some log line")
            print("{READY_PREFIX}127.0.0.1:4242")
            print("noise after ready", file=sys.stderr)
            time.sleep(60)
        """)
    )
    try:
        assert runtime.wait_ready(timeout=30) == "127.0.0.1:4242"
    finally:
        code = runtime.stop(grace=10)
    assert code == -signal.SIGTERM


def test_child_exiting_before_ready_reports_its_code_and_stderr() -> None:
    runtime = RuntimeProcess(child("import sys; print('bad config: nope', file=sys.stderr); sys.exit(3)"))
    try:
        with pytest.raises(RuntimeStartError, match="exited with code 3 before it was ready"):
            runtime.wait_ready(timeout=30)
    finally:
        runtime.stop()
    assert "bad config: nope" in runtime.stderr_tail()


def test_silent_child_times_out_and_one_ignoring_sigterm_is_killed() -> None:
    runtime = RuntimeProcess(
        child("""
            import signal, sys, time
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            print("ignoring SIGTERM", file=sys.stderr, flush=True)
            time.sleep(60)
        """)
    )
    try:
        with pytest.raises(RuntimeStartError, match=r"did not report ready within 0\.5s"):
            runtime.wait_ready(timeout=0.5)
        # Bounded poll until the handler is installed, so SIGTERM is surely ignored.
        deadline = time.monotonic() + 30
        while "ignoring SIGTERM" not in runtime.stderr_tail():
            assert time.monotonic() < deadline, "child never started"
            time.sleep(0.01)
    finally:
        code = runtime.stop(grace=0.5)
    assert code == -signal.SIGKILL
