"""A parsed file that is re-read when it changes, so credentials rotate without a restart."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

__all__ = ["ReloadingFile"]

log = logging.getLogger("agentrt.auth")
T = TypeVar("T")
_Stamp = tuple[int, int, int]


def _stamp(path: Path) -> _Stamp | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    # The inode changes on an atomic replace (write + rename), even within one mtime tick.
    return (info.st_mtime_ns, info.st_size, info.st_ino)


class ReloadingFile(Generic[T]):
    """The parsed content of a file, checked for changes at most every ``check_interval_s``.

    Authentication runs on every RPC, so the check is one ``stat`` at most once an interval;
    a changed file is parsed again. A change that does not parse (a half-written or broken
    rewrite, a deleted file) keeps the last good content and logs a warning once per change.

    Args:
        path: The file.
        parse: Turns the file's bytes into the value; raises ValueError with a message that
            names the problem and never a secret.
        what: What the file is, for messages ("tokens file").
        check_interval_s: Least time between two checks of the file.
        clock: Monotonic clock, seconds.

    Raises:
        ValueError: The file cannot be read or parsed at construction (the message names it).
    """

    def __init__(
        self,
        *,
        path: str | Path,
        parse: Callable[[bytes], T],
        what: str,
        check_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self._parse = parse
        self._what = what
        self._interval = check_interval_s
        self._clock = clock
        self._lock = threading.Lock()  # one reload at a time when called from several threads
        stamp = _stamp(self.path)
        self._value = self._load()
        self._stamp = stamp
        self._checked = clock()
        self.generation = 0
        """Counts successful reloads; caches derived from the value compare it."""

    def _load(self) -> T:
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise ValueError(f"cannot read {self._what} {self.path}: {exc.strerror}") from None
        try:
            return self._parse(data)
        except ValueError as exc:
            raise ValueError(f"{self._what} {self.path}: {exc}") from None

    @property
    def value(self) -> T:
        """The current content, re-read first when the interval passed and the file changed."""
        now = self._clock()
        if now - self._checked >= self._interval:
            with self._lock:
                if now - self._checked >= self._interval:
                    self._checked = now
                    self._refresh()
        return self._value

    def _refresh(self) -> None:
        stamp = _stamp(self.path)
        if stamp == self._stamp:
            return
        # Take the stamp before reading: a write racing the read is seen at the next check.
        self._stamp = stamp
        try:
            self._value = self._load()
        except ValueError as exc:
            log.warning("%s; keeping the previous content", exc)
            return
        self.generation += 1
        log.info("reloaded %s %s", self._what, self.path)
