"""One device, several evaluations at once: they check side by side (compiling takes no lock at all),
but the timed phase (and the one-off bandwidth measurement) has the device to itself.

A readers-writer lock over two ``flock`` files in the worker's data directory (one pair per device):
``shared()`` for the check, ``exclusive()`` for timing. A writer first takes the turnstile, so
a stream of new readers cannot starve a run waiting to time. The files are opened in the child's
trusted phase, before the sandbox seals, and kernel locks die with the process: a crashed or killed
child never leaves the device locked.
"""

from __future__ import annotations

import fcntl
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def lock_dir(data_dir: Path, device: str) -> Path:
    return Path(data_dir) / "device-locks" / re.sub(r"[^A-Za-z0-9_-]", "_", device)


class DeviceLock:
    def __init__(self, directory: str | os.PathLike[str] | None):
        self._fds: tuple[int, int] | None = None
        if directory is not None:
            os.makedirs(directory, exist_ok=True)
            self._fds = tuple(os.open(os.path.join(directory, name), os.O_RDWR | os.O_CREAT, 0o600)  # type: ignore[assignment]
                              for name in ("turnstile", "device"))

    @contextmanager
    def shared(self) -> Iterator[None]:
        if self._fds is None:
            yield
            return
        turnstile, device = self._fds
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
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(device, fcntl.LOCK_EX)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(device, fcntl.LOCK_UN)
