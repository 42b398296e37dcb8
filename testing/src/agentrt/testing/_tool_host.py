"""Helpers for tests that need a real tool host process.

Example::

    from agentrt.testing import spawn_tool_host

    def test_something(tmp_path):
        with spawn_tool_host(tmp_path / "host", plugins=["agentrt.plugins.demo_tools"]) as host:
            reply = host.call_tool("noop.echo", {"text": "hi"})
            assert reply.result == {"text": "hi"}
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from agentrt.testing._metrics import MetricSamples, scrape_metrics
from agentrt.testing._tool_calls import ToolReply, call_tool
from agentrt.toolhost._cli import LISTENING_PREFIX, METRICS_PREFIX

__all__ = ["ToolHostProcess", "spawn_tool_host", "start_tool_host"]


class ToolHostProcess:
    """A running ``python -m agentrt.toolhost`` child process.

    Attributes:
        address: ``HOST:PORT`` it listens on ("" until it announced it).
        process: The child process.
        data_dir: Its data directory.
    """

    def __init__(self, *, process: subprocess.Popen[str], data_dir: Path, stderr_file: IO[str]) -> None:
        self.process = process
        self.address = ""
        self.metrics_address = ""  # with --metrics-listen: where /metrics is served
        self.data_dir = data_dir
        self._stderr_file = stderr_file
        self._announced = threading.Event()
        self._stdout_tail: collections.deque[str] = collections.deque(maxlen=100)
        # One reader for the whole life of the child: it spots the listening line, then keeps
        # draining so a chatty plugin can never block the host on a full pipe.
        self._reader = threading.Thread(target=self._read_stdout, name="tool-host-stdout", daemon=True)
        self._reader.start()

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if not self.metrics_address and line.startswith(METRICS_PREFIX):
                self.metrics_address = line[len(METRICS_PREFIX) :].strip()
            elif not self.address and line.startswith(LISTENING_PREFIX):
                self.address = line[len(LISTENING_PREFIX) :].strip()
                self._announced.set()
            else:
                self._stdout_tail.append(line)
        self._announced.set()  # EOF: the child exited without (or after) announcing

    def _wait_announced(self, timeout: float) -> None:
        if not self._announced.wait(timeout):
            raise TimeoutError(f"no listening line within {timeout:.0f}s")
        if not self.address:
            raise RuntimeError(f"exited with code {self.process.wait()}")

    def metrics(self, *, token: str = "") -> MetricSamples:
        """Scrape the running host's ``/metrics`` (started with ``--metrics-listen``).

        Raises:
            RuntimeError: it serves no endpoint, or has exited.
        """
        if not self.metrics_address:
            raise RuntimeError("this tool host serves no /metrics (pass --metrics-listen in extra_args)")
        if self.process.poll() is not None:
            raise RuntimeError("the tool host has exited: read its metrics before stopping it")
        return scrape_metrics(self.metrics_address, token=token)

    def call_tool(
        self, tool: str, arguments: dict[str, Any], *, idempotency_key: str = "", timeout_s: float = 10.0
    ) -> ToolReply:
        """Call one of the host's tools as a run would; see :func:`agentrt.testing.call_tool`."""
        return call_tool(self.address, tool, arguments, idempotency_key=idempotency_key, timeout_s=timeout_s)

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.process.pid

    def stderr_text(self) -> str:
        """Everything the child wrote to stderr so far (its logs); available until :meth:`stop`."""
        self._stderr_file.flush()
        self._stderr_file.seek(0)
        return self._stderr_file.read()

    def stdout_tail(self) -> list[str]:
        """The last stdout lines other than the listening line (plugins' prints)."""
        return list(self._stdout_tail)

    def terminate(self) -> None:
        """Send SIGTERM (graceful shutdown) without waiting."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """Send SIGKILL: a crash, for recovery tests."""
        if self.process.poll() is None:
            self.process.kill()

    def wait(self, timeout: float = 10.0) -> int:
        """Wait for the child to exit and return its exit code."""
        return self.process.wait(timeout=timeout)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, wait up to ``timeout`` (then SIGKILL), release resources; returns the exit code."""
        try:
            self.terminate()
            try:
                code = self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                code = self.process.wait(timeout=timeout)
        finally:
            self._close()
        return code

    def _close(self) -> None:
        self._reader.join(timeout=5.0)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._stderr_file.close()


def _security_args(
    *,
    tls_cert: str | Path,
    tls_key: str | Path,
    client_ca: str | Path,
    grant_keys: str | Path,
    encryption_key_file: str | Path,
) -> list[str]:
    args: list[str] = []
    for flag, value in (
        ("--tls-cert", tls_cert),
        ("--tls-key", tls_key),
        ("--client-ca", client_ca),
        ("--grant-keys", grant_keys),
        ("--encryption-key-file", encryption_key_file),
    ):
        if value:
            args += [flag, str(value)]
    return args


def start_tool_host(
    data_dir: Path,
    *,
    plugins: Sequence[str] = (),
    extra_args: Sequence[str] = (),
    entrypoints: bool = False,
    listen: str = "127.0.0.1:0",
    startup_timeout: float = 30.0,
    tls_cert: str | Path = "",
    tls_key: str | Path = "",
    client_ca: str | Path = "",
    grant_keys: str | Path = "",
    encryption_key_file: str | Path = "",
    python: str | Path = "",
) -> ToolHostProcess:
    """Start ``sys.executable -m agentrt.toolhost`` and wait for its listening line.

    The caller must call :meth:`ToolHostProcess.stop`; prefer :func:`spawn_tool_host`.

    Args:
        data_dir: The host's ``--data-dir``.
        plugins: ``--plugin`` values (module names or ``.py`` paths).
        extra_args: More command-line arguments, e.g. ``["--set", "k=v"]`` or ``["--insecure"]``.
        entrypoints: Also load the ``agentrt.tools`` entry points (off: tests name their plugins).
        listen: ``--listen`` address.
        startup_timeout: Seconds to wait for the listening line.
        tls_cert: ``--tls-cert`` (with ``tls_key`` and ``client_ca``: serve mTLS), e.g. from
            :func:`agentrt.toolhost.security.generate_dev_pki`.
        tls_key: ``--tls-key``.
        client_ca: ``--client-ca``.
        grant_keys: ``--grant-keys``: PEM public keys whose call grants the host obeys.
        encryption_key_file: ``--encryption-key-file``: seal stored results.
        python: The interpreter to run the host with (e.g. another venv's); this one when empty.

    Returns:
        The running process, with its address.

    Raises:
        RuntimeError: The host exited or did not announce its address in time (message includes stderr).
    """
    interpreter = str(python) if python else sys.executable
    cmd = [interpreter, "-m", "agentrt.toolhost", "--listen", listen, "--data-dir", str(data_dir)]
    for plugin in plugins:
        cmd += ["--plugin", plugin]
    if not entrypoints:
        cmd.append("--no-entrypoints")
    cmd += _security_args(
        tls_cert=tls_cert,
        tls_key=tls_key,
        client_ca=client_ca,
        grant_keys=grant_keys,
        encryption_key_file=encryption_key_file,
    )
    cmd += list(extra_args)
    # By default the child is this interpreter, so it imports the same agentrt distributions.
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    # Outlives this function: ToolHostProcess closes it in stop().
    stderr_file = tempfile.TemporaryFile(mode="w+", encoding="utf-8", prefix="toolhost-stderr-")  # noqa: SIM115
    process = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr_file, text=True, env=env
    )
    host = ToolHostProcess(process=process, data_dir=data_dir, stderr_file=stderr_file)
    try:
        host._wait_announced(startup_timeout)
    except Exception as exc:
        stderr = host.stderr_text()
        host.kill()
        host.stop()
        raise RuntimeError(f"tool host did not start ({exc}); stderr:\n{stderr}") from None
    except BaseException:
        host.kill()
        host.stop()
        raise
    return host


@contextlib.contextmanager
def spawn_tool_host(
    data_dir: Path,
    *,
    plugins: Sequence[str] = (),
    extra_args: Sequence[str] = (),
    entrypoints: bool = False,
    listen: str = "127.0.0.1:0",
    startup_timeout: float = 30.0,
    tls_cert: str | Path = "",
    tls_key: str | Path = "",
    client_ca: str | Path = "",
    grant_keys: str | Path = "",
    encryption_key_file: str | Path = "",
    python: str | Path = "",
) -> Iterator[ToolHostProcess]:
    """Run a real tool host process for the duration of a ``with`` block.

    Args:
        data_dir: The host's ``--data-dir``.
        plugins: ``--plugin`` values (module names or ``.py`` paths).
        extra_args: More command-line arguments.
        entrypoints: Also load the ``agentrt.tools`` entry points.
        listen: ``--listen`` address.
        startup_timeout: Seconds to wait for the listening line.
        tls_cert: ``--tls-cert``; see :func:`start_tool_host`.
        tls_key: ``--tls-key``.
        client_ca: ``--client-ca``.
        grant_keys: ``--grant-keys``.
        encryption_key_file: ``--encryption-key-file``.
        python: The interpreter to run the host with; this one when empty.

    Yields:
        The running process; ``.address`` is ``HOST:PORT``. It is stopped (SIGTERM) on exit
        unless the block already stopped or killed it.
    """
    host = start_tool_host(
        data_dir,
        plugins=plugins,
        extra_args=extra_args,
        entrypoints=entrypoints,
        listen=listen,
        startup_timeout=startup_timeout,
        tls_cert=tls_cert,
        tls_key=tls_key,
        client_ca=client_ca,
        grant_keys=grant_keys,
        encryption_key_file=encryption_key_file,
        python=python,
    )
    try:
        yield host
    finally:
        host.stop()
