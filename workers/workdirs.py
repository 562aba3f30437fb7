"""Where a worker's scratch directories live, and the sweep of those a killed worker left behind.

A run's private directory (workers/sandbox.py), a TP group's (workers/tp_group.py) and the zygote's home are
removed when they are done with, but a worker killed outright (SIGKILL, the OOM killer, a lost host process) removes
nothing: the variant's source and whatever it wrote would stay in the temp folder for good, one directory per cut run.
So each process makes them inside one owner folder of its own and holds an exclusive flock on a file in it for as long
as it lives. The kernel drops that lock when the process dies, however it dies; the next process to ask for its owner
folder removes every owner folder whose lock it can take.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import tempfile
import threading

OWNER_PREFIX = "kt-owner-"
LOCK_NAME = ".owner.lock"

_guard = threading.Lock()
_root: str | None = None
_root_pid: int | None = None
_lock_fd: int | None = None  # held open (and locked) for the life of the process: never closed on purpose


def run_root() -> str:
    """This process's owner folder (made, and stale ones swept, on first use in each process)."""
    global _root, _root_pid, _lock_fd
    with _guard:
        if _root is not None and _root_pid == os.getpid() and os.path.isdir(_root):
            return _root
        sweep_stale()
        root = tempfile.mkdtemp(prefix=OWNER_PREFIX)
        # Locked under a temporary name, then renamed: a sweep opens only LOCK_NAME, so it never finds the file
        # between its creation and its lock (it would take the lock first and remove a live folder).
        staging = os.path.join(root, LOCK_NAME + ".new")
        fd = os.open(staging, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(staging, os.path.join(root, LOCK_NAME))
        _root, _root_pid, _lock_fd = root, os.getpid(), fd
        atexit.register(_remove_own, root, os.getpid())
        return root


def _remove_own(root: str, pid: int) -> None:
    if os.getpid() == pid:  # not in a forked child that exits through Python: the folder is its parent's
        shutil.rmtree(root, ignore_errors=True)


def sweep_stale(tmp: str | None = None) -> list[str]:
    """Remove the owner folders in ``tmp`` (the temp folder by default) whose owner has died. Returns their paths."""
    tmp = tmp or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(tmp)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(OWNER_PREFIX):
            continue
        path = os.path.join(tmp, name)
        try:
            fd = os.open(os.path.join(path, LOCK_NAME), os.O_RDWR | os.O_CLOEXEC)
        except OSError:  # no lock yet (an owner still starting), or not ours to open
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: its owner lives (this process's own folder included: a second open conflicts too)
            os.close(fd)
            continue
        try:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        finally:
            os.close(fd)
    return removed
