"""One device, several evaluations at once: they check side by side (compiling takes no lock at all),
but the timed phase (and the one-off bandwidth measurement) has the device to itself.

A readers-writer lock over two ``flock`` files in the worker's data directory (one pair per device):
``shared()`` for the check, ``exclusive()`` for timing. A writer first takes the turnstile, so
a stream of new readers cannot starve a run waiting to time. The files are opened in the child's
trusted phase, before the sandbox seals, and kernel locks die with the process: a crashed or killed
child never leaves the device locked.

Waiting for the device is not the variant's time: with ``wait_log`` the lock writes how long this
process has waited (and since when it is waiting now) to a small file that the worker reads when the
run's wall-clock limit is reached, and extends the limit by that much (workers/sandbox.py, capped).
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def lock_dir(data_dir: Path, device: str) -> Path:
    return Path(data_dir) / "device-locks" / re.sub(r"[^A-Za-z0-9_-]", "_", device)


def read_wait_log(path: str | os.PathLike[str]) -> float:
    """Seconds the process writing ``path`` has waited for the device so far, including a wait still
    in progress (CLOCK_MONOTONIC is one clock for every process of the host). 0 if unreadable."""
    try:
        waited, since = (float(v) for v in Path(path).read_text().split()[:2])
    except (OSError, ValueError):
        return 0.0
    return max(0.0, waited + (time.monotonic() - since if since > 0 else 0.0))


class DeviceLock:
    def __init__(self, directory: str | os.PathLike[str] | None, wait_log: str | os.PathLike[str] | None = None):
        self._fds: tuple[int, int] | None = None
        self._log_fd: int | None = None
        self.waited_s = 0.0
        if directory is not None:
            os.makedirs(directory, exist_ok=True)
            self._fds = tuple(os.open(os.path.join(directory, name), os.O_RDWR | os.O_CREAT, 0o600)  # type: ignore[assignment]
                              for name in ("turnstile", "device"))
            if wait_log is not None:
                self._log_fd = os.open(wait_log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                self._log(0.0)

    def _log(self, since: float) -> None:
        if self._log_fd is not None:
            line = f"{self.waited_s:.6f} {since:.6f}\n".ljust(48).encode()  # fixed width: one pwrite, no stale tail
            os.pwrite(self._log_fd, line, 0)

    @contextmanager
    def _waiting(self) -> Iterator[None]:
        since = time.monotonic()
        self._log(since)
        try:
            yield
        finally:
            self.waited_s += time.monotonic() - since
            self._log(0.0)

    @contextmanager
    def shared(self) -> Iterator[None]:
        if self._fds is None:
            yield
            return
        turnstile, device = self._fds
        with self._waiting():
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            fcntl.flock(device, fcntl.LOCK_SH)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(device, fcntl.LOCK_UN)

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        if self._fds is None:
            yield
            return
        turnstile, device = self._fds
        with self._waiting():
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            try:
                fcntl.flock(device, fcntl.LOCK_EX)
            finally:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(device, fcntl.LOCK_UN)
