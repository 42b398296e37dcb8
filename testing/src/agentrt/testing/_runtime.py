"""Helpers for tests that need a real runtime server process (``agentrt-server`` installed).

Example::

    with spawn_runtime(config_path, cwd=tmp_path) as runtime:
        client = Client(runtime.address)
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from agentrt.testing._metrics import MetricSamples, scrape_metrics

__all__ = ["METRICS_PREFIX", "READY_PREFIX", "RuntimeProcess", "spawn_runtime"]

#: The line a runtime prints once it serves (``agentrt.server.api``'s; a test keeps them equal).
#: Not imported from the server: agentrt-testing installs without it.
READY_PREFIX = "agentrt-runtime listening on "
#: Printed before the ready line when the process serves ``/metrics`` (``--metrics-listen``).
METRICS_PREFIX = "agentrt-runtime metrics on "


class RuntimeProcess:
    """A running ``python -m agentrt.server`` child; ``address`` is where it serves gRPC.

    It serves ``/metrics`` on a free loopback port (``metrics_address``) unless ``args`` give
    ``--metrics-listen`` themselves (``--metrics-listen ""`` turns it off). ``python`` is the
    interpreter to run (default: this one, so it imports the same agentrt distributions; another
    checkout's venv compares two versions side by side).
    """

    def __init__(
        self,
        args: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str] | None = None,
        python: str | Path = "",
    ):
        if not any(a == "--metrics-listen" or a.startswith("--metrics-listen=") for a in args):
            args = [*args, "--metrics-listen", "127.0.0.1:0"]
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - lives as long as the child
        child_env = dict(os.environ if env is None else env)
        self.process = subprocess.Popen(
            [str(python or sys.executable), "-m", "agentrt.server", *args],
            cwd=cwd,
            env=child_env,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self.address = ""
        self.metrics_address = ""  # HOST:PORT of /metrics, when the process serves it
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:  # drain for the child's whole life
            if not self.metrics_address and line.startswith(METRICS_PREFIX):
                self.metrics_address = line.removeprefix(METRICS_PREFIX).strip()
            if not self.address and line.startswith(READY_PREFIX):
                self.address = line.removeprefix(READY_PREFIX).strip()
                self._ready.set()
        self._ready.set()

    def wait_ready(self, timeout: float = 60.0) -> str:
        """Block until the server announced its address.

        Raises:
            RuntimeError: the child exited first (its stderr is in the message) or stayed silent.
        """
        if not self._ready.wait(timeout) or not self.address:
            code = self.process.poll()
            raise RuntimeError(f"runtime did not start (exit {code}):\n{self.stderr_text()[-4000:]}")
        return self.address

    def metrics(self, *, token: str = "") -> MetricSamples:
        """Scrape the running process's ``/metrics`` over HTTP.

        Raises:
            RuntimeError: it serves no endpoint (started without ``--metrics-listen``) or has exited.
        """
        if not self.metrics_address:
            raise RuntimeError("this runtime serves no /metrics (start it with --metrics-listen)")
        if self.process.poll() is not None:
            raise RuntimeError("the runtime has exited: read its metrics before stopping it")
        return scrape_metrics(self.metrics_address, token=token)

    def counters(self) -> Counter[str]:
        """The engine's counters (``agentrt_<name>_total`` summed over attributes), scraped now.

        Raises:
            RuntimeError: as :meth:`metrics`.
        """
        return self.metrics().counters()

    def wait_exit(self, timeout: float = 60.0) -> int:
        """Wait for the process to end on its own (e.g. a fault-injection crash)."""
        return int(self.process.wait(timeout))

    def stderr_text(self) -> str:
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read()

    def stop(self, *, timeout: float = 30.0) -> int:
        """SIGTERM, wait (then SIGKILL); returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(timeout=5)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return int(self.process.returncode)

    def kill(self) -> None:
        """SIGKILL: a crash with no cleanup."""
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        self.process.wait()

    def close(self) -> None:
        self.stop()
        if not self._stderr.closed:
            self._stderr.close()


@contextlib.contextmanager
def spawn_runtime(
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    python: str | Path = "",
) -> Iterator[RuntimeProcess]:
    """Start a runtime process with ``args`` (under ``python``, default this interpreter), wait
    until it serves, stop it on exit."""
    runtime = RuntimeProcess(args, cwd=cwd, env=env, python=python)
    try:
        runtime.wait_ready(timeout)
        yield runtime
    finally:
        runtime.close()
