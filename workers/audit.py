"""Audit hook for the child: refuses network, process creation and heap introspection.

Installed before the variant is imported; Python offers no way to remove an audit hook. Refusals
are also recorded, because a variant may catch the exception and carry on: any recorded refusal
rejects the run (workers/pipeline.py). The network namespace (workers/sandbox.py) is the real wall
for code that bypasses Python (ctypes); this hook makes the attempt visible and named.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any, Callable

# Compilers and tools the Triton / CuTe DSL backends run as subprocesses.
ALLOWED_TOOLS = frozenset({"ptxas", "nvdisasm", "cuobjdump", "nvlink", "fatbinary", "gcc", "cc", "clang",
                           "g++", "c++", "ld", "ldconfig", "ldconfig.real"})

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


class Refused(PermissionError):
    pass


def install(private_dirs: tuple[str, ...]) -> Callable[[], list[dict[str, str]]]:
    """Install the hook; return a getter of the refusals recorded so far."""
    refusals: list[dict[str, str]] = []
    pid = os.getpid()
    private = tuple(os.path.realpath(d) for d in private_dirs)

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
        # A tool named "ptxas" that the variant wrote itself is not the toolchain's.
        return os.path.basename(real) in ALLOWED_TOOLS and not real.startswith(private)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event in _NETWORK:
            refuse(_NETWORK[event], event, repr(args[1:2]))
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
