"""``agentrt demo``: start a local runtime on demo defaults, run one agent, show what happened.

The runtime runs as a child process (``python -m agentrt.server --demo``) on a free
port; it prints ``agentrt-runtime listening on HOST:PORT`` when it is ready. The
child is stopped with SIGTERM when the demo ends, however it ends.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Sequence
from typing import IO, Final

from agentrt.client._errors import RPCError
from agentrt.client._format import event_to_json, format_event, format_run, run_to_json
from agentrt.client._sync_client import Client
from agentrt.proto.runtime.v1 import run_pb2

DEMO_AGENT: Final = "refund-demo"
DEMO_INPUT: Final = "Please refund order A100, it arrived broken."
READY_PREFIX: Final = "agentrt-runtime listening on "
READY_TIMEOUT_S: Final = 60.0
STOP_GRACE_S: Final = 15.0
_STDERR_TAIL_LINES = 40


class RuntimeStartError(Exception):
    """The runtime child exited or stayed silent instead of reporting it was ready."""


class RuntimeProcess:
    """A runtime child process whose stdout announces the address it listens on.

    Args:
        argv: The command to run.
        env: Environment of the child; the parent's when None.
    """

    def __init__(self, argv: Sequence[str], *, env: dict[str, str] | None = None) -> None:
        child_env = dict(os.environ if env is None else env)
        # The ready line must not sit in the child's stdout buffer.
        child_env.setdefault("PYTHONUNBUFFERED", "1")
        self._proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env,
            # Ctrl-C reaches only us; we then stop the child with SIGTERM, as documented.
            start_new_session=True,
        )
        self._ready: queue.Queue[str | None] = queue.Queue()
        self._stderr: deque[str] = deque(maxlen=_STDERR_TAIL_LINES)
        assert self._proc.stdout is not None and self._proc.stderr is not None
        self._threads = [
            threading.Thread(target=self._read_stdout, args=(self._proc.stdout,), daemon=True),
            threading.Thread(target=self._read_stderr, args=(self._proc.stderr,), daemon=True),
        ]
        for t in self._threads:
            t.start()

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self._proc.pid

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> str:
        """Waits for the ready line and returns the ``HOST:PORT`` it names.

        Raises:
            RuntimeStartError: The child exited first, or ``timeout`` seconds passed.
        """
        try:
            target = self._ready.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeStartError(f"the runtime did not report ready within {timeout:g}s") from None
        if target is None:
            code = self._proc.wait()
            raise RuntimeStartError(f"the runtime exited with code {code} before it was ready")
        return target

    def stderr_tail(self) -> str:
        """The last lines the child wrote to stderr."""
        return "".join(self._stderr)

    def stop(self, grace: float = STOP_GRACE_S) -> int:
        """Stops the child with SIGTERM (SIGKILL after ``grace`` seconds) and returns its exit code."""
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for t in self._threads:
            # A grandchild that inherited the pipes could keep them open; don't hang on it.
            t.join(timeout=5.0)
        if not any(t.is_alive() for t in self._threads):
            assert self._proc.stdout is not None and self._proc.stderr is not None
            self._proc.stdout.close()
            self._proc.stderr.close()
        return self._proc.returncode

    def _read_stdout(self, stream: IO[str]) -> None:
        announced = False
        for line in stream:
            # Keep draining after the ready line so the child never blocks on a full pipe.
            if not announced and line.startswith(READY_PREFIX):
                announced = True
                self._ready.put(line[len(READY_PREFIX) :].strip())
        if not announced:
            self._ready.put(None)

    def _read_stderr(self, stream: IO[str]) -> None:
        for line in stream:
            self._stderr.append(line)


def _print_tail(runtime: RuntimeProcess) -> None:
    tail = runtime.stderr_tail()
    if tail:
        print("--- runtime stderr (last lines) ---", file=sys.stderr)
        print(tail.rstrip("\n"), file=sys.stderr)


def run_demo(*, input_text: str = DEMO_INPUT, json_output: bool = False, timeout: float = 10.0) -> int:
    """Runs the first-contact demo.

    Args:
        input_text: The user's input to the ``refund-demo`` agent.
        json_output: Print one JSON object per line instead of readable lines.
        timeout: Deadline of unary calls, in seconds.

    Returns:
        0 when the run completed, 1 otherwise.

    Raises:
        RPCError: A call to the runtime failed (the runtime's stderr tail is printed first).
    """
    argv = [sys.executable, "-m", "agentrt.server", "--demo", "--listen", "127.0.0.1:0"]
    print("agentrt demo: starting the runtime (SQLite, scripted model, local tool host)...", file=sys.stderr)
    runtime = RuntimeProcess(argv)
    try:
        try:
            target = runtime.wait_ready()
        except RuntimeStartError as exc:
            print(f"error: {exc}", file=sys.stderr)
            _print_tail(runtime)
            return 1
        print(f"agentrt demo: runtime at {target}; running agent {DEMO_AGENT}", file=sys.stderr)
        # The demo's runtime is local and plaintext: no AGENTRT_* credential applies to it.
        plain = Client(
            target,
            timeout=timeout,
            tls=False,
            ca_file="",
            cert_file="",
            key_file="",
            token="",
            server_name="",
        )
        with plain as client:
            try:
                run = _run_once(client, input_text, json_output)
            except RPCError:
                _print_tail(runtime)
                raise
        if run is None:
            print("error: the run's stream ended without any event", file=sys.stderr)
            return 1
        if not json_output:
            print("\nfinal run:")
        print(run_to_json(run) if json_output else format_run(run), flush=True)
        return 0 if run.phase == run_pb2.RUN_PHASE_COMPLETED else 1
    finally:
        runtime.stop()


def _run_once(client: Client, input_text: str, json_output: bool) -> run_pb2.Run | None:
    run_id = ""
    with client.run_agent(DEMO_AGENT, input_text) as stream:
        for event in stream:
            run_id = event.run_id or run_id
            print(event_to_json(event) if json_output else format_event(event), flush=True)
    if not run_id:
        return None
    run = client.get_run(run_id)
    if run.phase == run_pb2.RUN_PHASE_WAITING_APPROVAL:
        # The refund is over the policy's limit: the run paused for a person. The demo plays
        # the approver, presenting the args_hash and revision it was shown.
        pending = run.pending_approval
        print(
            f"agentrt demo: run paused for approval {pending.approval_id} ({pending.impact_summary}); "
            f"approving as the operator",
            file=sys.stderr,
            flush=True,
        )
        client.resolve_approval(
            run_id,
            pending.approval_id,
            approve=True,
            args_hash=pending.args_hash,
            expected_revision=run.revision,
            comment="approved in the demo",
        )
        # To the run's end: the demo shows the outcome, not the records of a cleanup retried later.
        with client.stream_events(run_id, after_seq=run.last_seq, follow=True, cleanup_tail=False) as stream:
            for event in stream:
                print(event_to_json(event) if json_output else format_event(event), flush=True)
        run = client.get_run(run_id)
    return run
