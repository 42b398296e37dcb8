"""Spawns a local tool host child process for the embedded default.

The child's stderr is inherited (its logs land beside the runtime's); stdout is
piped only for the one readiness line.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence

READY_PREFIX = "agentrt-toolhost listening on "


class SpawnedToolHost:
    """A tool host child process; ``address`` is where it listens."""

    def __init__(self, process: asyncio.subprocess.Process, address: str):
        self.process = process
        self.address = address

    @classmethod
    async def start(
        cls, *, data_dir: str, plugins: Sequence[str] = (), entrypoints: bool = True, timeout_s: float = 30.0
    ) -> SpawnedToolHost:
        """Start ``python -m tool_host`` on a free loopback port and wait until it listens.

        Raises:
            RuntimeError: the child exited or stayed silent past ``timeout_s``.
        """
        args = [sys.executable, "-m", "tool_host", "--listen", "127.0.0.1:0", "--data-dir", data_dir]
        for plugin in plugins:
            args += ["--plugin", plugin]
        if not entrypoints:
            args.append("--no-entrypoints")
        process = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE)
        assert process.stdout is not None
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    line = (await process.stdout.readline()).decode()
                    if not line:
                        break
                    if line.startswith(READY_PREFIX):
                        return cls(process, line.removeprefix(READY_PREFIX).strip())
        except TimeoutError:
            pass
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise RuntimeError(f"local tool host did not start (exit {process.returncode}); its stderr is above")

    async def stop(self, *, grace_s: float = 5.0) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(grace_s):
                    await self.process.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
                await self.process.wait()
        # Drain stdout so its transport closes cleanly.
        if self.process.stdout is not None:
            with contextlib.suppress(Exception):
                await self.process.stdout.read()
