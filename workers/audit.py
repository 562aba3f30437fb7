"""Audit hook for the child: refuses network, process creation, heap introspection, other processes'
/proc entries, any open under the worker's data dir (its database, other state) except the compile
cache, and writes outside the private directory and the compile cache.

Installed before the variant is imported; Python offers no way to remove an audit hook. Refusals
are also recorded, because a variant may catch the exception and carry on: any recorded refusal
rejects the run (workers/pipeline.py). The network namespace (workers/sandbox.py) is the real wall
for code that bypasses Python (ctypes); this hook makes the attempt visible and named. The same holds
for the filesystem rules: they see Python-level opens and file operations (``open``, ``os.open``,
``os.remove``, ``os.rename``, ``shutil.rmtree``, ...), not a libc call made through ctypes, and a
path resolved here can be swapped by another thread before the open (see the sandbox's report of
what is missing: a mount namespace or an unprivileged uid would make these walls).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from typing import Any, Callable

# Compilers and tools the Triton / CuTe DSL backends run as subprocesses.
ALLOWED_TOOLS = frozenset({"ptxas", "nvdisasm", "cuobjdump", "nvlink", "fatbinary", "gcc", "cc", "clang",
                           "g++", "c++", "ld", "ldconfig", "ldconfig.real",
                           # platform.architecture() runs `file -b <python>` when Triton builds its
                           # launcher on a GPU host (seen on the H200): read-only, harmless
                           "file"})

# Python helpers the backends run in a fresh interpreter (Triton's AOT compile on the CPU).
ALLOWED_PYTHON_MODULES = frozenset({"kernels.backends.triton_backend"})

# event -> reason code of the refusal
_NETWORK = {"socket.connect": "network_attempt", "socket.bind": "network_attempt",
            "socket.sendto": "network_attempt", "socket.sendmsg": "network_attempt"}
_PROCESS = {"os.system": "forbidden_subprocess", "os.exec": "forbidden_subprocess",
            "os.posix_spawn": "forbidden_subprocess", "os.spawn": "forbidden_subprocess",
            "os.fork": "forbidden_subprocess", "os.forkpty": "forbidden_subprocess"}
# Finding the harness' objects (result channel token, captured timers) through the heap.
_INTROSPECTION = {"gc.get_objects": "introspection_attempt", "gc.get_referrers": "introspection_attempt",
                  "gc.get_referents": "introspection_attempt"}


# Files a variant may always write (Python's own stdio aliases; /dev/null for discarded output).
ALWAYS_WRITABLE = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# event -> indices of the path arguments it modifies, and of its dir_fd argument (or None)
_MUTATIONS: dict[str, tuple[tuple[int, ...], int | None]] = {
    "os.mkdir": ((0,), 2), "os.remove": ((0,), 1), "os.rmdir": ((0,), 1), "os.rename": ((0, 1), 2),
    "os.symlink": ((1,), 2), "os.link": ((1,), 3), "os.truncate": ((0,), None), "os.chmod": ((0,), 2),
    "os.chown": ((0,), 3), "os.utime": ((0,), 3), "shutil.rmtree": ((0,), 1), "os.mkfifo": ((0,), 2),
    "os.mknod": ((0,), 3),
}
_PROC_PID = re.compile(r"^/proc/(\d+)(/|$)")

_filesystem: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())


class Refused(PermissionError):
    pass


def configure_filesystem(protected: list[str], writable: list[str]) -> None:
    """Set the filesystem policy the next ``install`` binds: no open at all under ``protected`` (the
    worker's data dir) except below ``writable`` or the private dirs; writes only below those.
    Called by the child before the spec is read; ``install`` copies it into the hook's closure, so a
    variant rebinding this module's globals later changes nothing."""
    global _filesystem
    _filesystem = (tuple(os.path.realpath(p) for p in protected), tuple(os.path.realpath(p) for p in writable))


def _below(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _resolve(path: Any, dir_fd: Any = None) -> str | None:
    """Absolute real path of a path argument (None for an fd: no name to judge)."""
    if isinstance(path, int) or path is None:
        return None
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    path = os.fspath(path)
    if not os.path.isabs(path) and isinstance(dir_fd, int) and dir_fd >= 0:
        try:
            path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
        except OSError:
            pass
    return os.path.realpath(path)


def install(private_dirs: tuple[str, ...]) -> Callable[[], list[dict[str, str]]]:
    """Install the hook; return a getter of the refusals recorded so far."""
    refusals: list[dict[str, str]] = []
    pid = os.getpid()
    private = tuple(os.path.realpath(d) for d in private_dirs)
    protected, writable = _filesystem[0], _filesystem[1] + private

    def refuse(code: str, event: str, detail: str) -> None:
        refusals.append({"code": code, "event": event, "detail": detail[:300]})
        raise Refused(f"sandbox refused {event} ({code.replace('_', ' ')}): {detail[:200]}")

    def tool_allowed(args: tuple[Any, ...]) -> bool:
        executable, argv = args[0], args[1]
        prog = executable or (argv[0] if isinstance(argv, (list, tuple)) and argv else argv)
        if isinstance(prog, bytes):
            prog = os.fsdecode(prog)
        if not isinstance(prog, (str, os.PathLike)):
            return False
        path = os.fspath(prog)
        resolved = path if os.path.isabs(path) else shutil.which(path)
        if resolved is None:
            return False
        real = os.path.realpath(resolved)
        if real == os.path.realpath(sys.executable):
            return isinstance(argv, (list, tuple)) and len(argv) > 2 and argv[1] == "-m" \
                and argv[2] in ALLOWED_PYTHON_MODULES
        # A tool named "ptxas" that the variant wrote itself is not the toolchain's. The name may be
        # the invoked one (/usr/bin/gcc is a link to x86_64-linux-gnu-gcc-12 on Debian and Ubuntu).
        names = {os.path.basename(path), os.path.basename(real)}
        return bool(names & ALLOWED_TOOLS) and not real.startswith(private) \
            and not os.path.realpath(os.path.dirname(resolved)).startswith(private)

    def check_path(event: str, raw: Any, real: str | None, write: bool) -> None:
        if real is None:
            return
        if (m := _PROC_PID.match(real)) and int(m.group(1)) != pid:
            refuse("proc_access", event, f"{raw!r}: another process' /proc entry")
        if _below(real, protected) and not _below(real, writable):
            refuse("data_dir_access", event, f"{raw!r}: the worker's data directory")
        if write and not _below(real, writable) and str(raw) not in ALWAYS_WRITABLE:
            refuse("write_outside_sandbox", event, f"{raw!r}: outside the private directory and the compile cache")

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None))[:3]
            write = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                (isinstance(flags, int) and bool(flags & _WRITE_FLAGS))
            check_path(event, path, _resolve(path), write)
        elif event in _MUTATIONS:
            indices, dir_fd_at = _MUTATIONS[event]
            dir_fd = args[dir_fd_at] if dir_fd_at is not None and dir_fd_at < len(args) else None
            for i in indices:
                check_path(event, args[i], _resolve(args[i], dir_fd), write=True)
        elif event in _NETWORK:
            refuse(_NETWORK[event], event, repr(args[1:2]))
        elif event == "os.posix_spawn" and tool_allowed(args):
            # subprocess.Popen runs the toolchain through posix_spawn when close_fds=False (Triton's
            # ptxas call, seen refused on the H200): the same allow-list as the Popen event
            pass
        elif event in _PROCESS:
            refuse(_PROCESS[event], event, repr(args[:2]))
        elif event in _INTROSPECTION:
            refuse(_INTROSPECTION[event], event, "")
        elif event == "subprocess.Popen" and not tool_allowed(args):
            refuse("forbidden_subprocess", event, repr(args[1]))
        elif event in ("os.kill", "os.killpg") and args[0] not in (pid, 0):
            refuse("forbidden_signal", event, repr(args))

    sys.addaudithook(hook)
    return lambda: list(refusals)
