"""The zygote: one long-lived template process per worker that forks each evaluation's child.

Started by workers/sandbox.py as ``python -P -m workers.zygote <control_fd>`` with the environment
the children need (already scrubbed, TRITON_INTERPRET / cache dirs decided), it imports torch,
numpy, the harness, the slot catalogue and triton (when present) once, then serves fork requests.
A fresh interpreter costs seconds of imports per evaluation; a fork costs milliseconds.

Why forking here is safe:
  * CUDA is never initialised in this process (nothing here touches ``torch.cuda`` beyond import);
    every child creates its own context after the fork. The hello message reports
    ``torch.cuda.is_initialized()`` and the worker refuses a zygote for which it is true.
  * The process is single-threaded at every fork: no torch op runs here (the intra-op pool starts
    on the first parallel op) and OMP_NUM_THREADS=1 keeps OpenBLAS (numpy) from starting its pool
    at import. The thread count is checked before each fork; with more than one thread the zygote
    refuses to fork (another thread could hold a lock the child would inherit held) and the worker
    falls back to a fresh interpreter.
  * No variant code ever runs here: the child applies the sandbox (session, limits, network
    namespace, scrubbed environment, private cwd/HOME) before it reads the spec, and each child is a
    fresh fork, so nothing a variant imports or patches reaches the next evaluation.

Control protocol (AF_UNIX SOCK_SEQPACKET, one JSON message per packet):
  zygote -> worker on the control socket: ``{"hello": {...}}`` once, when ready.
  worker -> zygote: ``{"fork": {...}}`` with fds [event socket, stdin, stdout, stderr, result pipe].
  zygote -> worker on the event socket: ``{"pid": n}``, later ``{"status": raw wait status}``;
  the child itself sends ``{"sandboxed": true}`` there once its sandbox is in place.
EOF on the control socket (the worker exited) ends the zygote and kills its children's groups.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import resource
import select
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any

from workers.workdirs import run_root

CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
MAX_PACKET = 1 << 20
FORK_FDS = 5  # event socket, stdin, stdout, stderr, result pipe

_libc = ctypes.CDLL(None, use_errno=True)


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _preload() -> dict[str, Any]:
    """Import everything a child needs, and nothing that starts a thread or a CUDA context."""
    import numpy  # noqa: F401
    import torch

    import kernels.catalogue
    import workers.child  # noqa: F401
    import workers.pipeline  # noqa: F401  (torch.profiler, the timers, the check and bench code)
    # The child's profiler warm-up (workers/pipeline.py) would import it first: ~1 s of CPU in every non-torch
    # evaluation. An import starts no thread and touches no CUDA; starting the profiler here would, so it stays there.
    import torch._dynamo  # noqa: F401
    from kernels.backends.compile_cache import configure_language_caches

    kernels.catalogue.all_slots()  # slot objects are plain Python: no tensors are created
    configure_language_caches()  # Triton and CuTe DSL bind their cache dirs at import
    triton_version = None
    try:
        import triton
        import triton.language  # noqa: F401

        import kernels.backends.triton_backend  # noqa: F401
        triton_version = triton.__version__
    except ImportError:
        pass
    return {"pid": os.getpid(), "threads": _threads(), "cuda_initialized": bool(torch.cuda.is_initialized()),
            "torch": torch.__version__, "triton": triton_version,
            "triton_interpret": os.environ.get("TRITON_INTERPRET", "")}


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    try:
        sock.send(json.dumps(message).encode())
    except OSError:
        pass  # the worker gave up on this evaluation: nobody to tell


def _become_child(request: dict[str, Any], fds: list[int], zygote_pid: int) -> None:
    """In the forked child: apply the sandbox, then run the ordinary child entry point. Never returns."""
    event_fd, stdin_fd, stdout_fd, stderr_fd, result_fd = fds
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a fresh interpreter
        os.setsid()  # its own session and process group: the worker kills the group whole
        # Killed with the zygote (single-threaded, so "the parent thread" is the zygote itself); the
        # zygote in turn kills its children when the worker's control socket closes.
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != zygote_pid:  # the zygote died before prctl took effect
            os._exit(1)
        # Standard streams and the result pipe at fixed numbers; every other fd of the zygote (control
        # socket, other evaluations' event sockets, the selector) is closed before any variant exists.
        # Copies above the targets first, so no dup2 overwrites a source not yet placed.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 64) for fd in (stdin_fd, stdout_fd, stderr_fd, result_fd, event_fd)]
        for dst, src in enumerate(high):
            os.dup2(src, dst, inheritable=dst < 3)
        os.closerange(5, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        for which, value in request["limits"]:
            _, hard = resource.getrlimit(which)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (value, value))
        _libc.unshare(CLONE_NEWNET)  # fails without CAP_SYS_ADMIN: the worker records it
        os.chdir(request["workdir"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # re-read TMPDIR (the private one) on next use
        import numpy
        numpy.random.seed()  # forks share the zygote's global RNG state; a fresh interpreter would not
        os.write(4, json.dumps({"sandboxed": True}).encode())
        os.close(4)
        from workers.child import main
        main(result_fd=3)  # ends in os._exit
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        try:
            os.write(2, traceback.format_exc().encode(errors="replace"))
        except OSError:
            pass
    os._exit(code)


class _Zygote:
    def __init__(self, control: socket.socket):
        self.control = control
        self.children: dict[int, socket.socket] = {}  # pid -> its event socket
        self.selector = selectors.DefaultSelector()
        self.wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd is written
        self.selector.register(control, selectors.EVENT_READ, "control")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "sigchld")

    def serve(self) -> None:
        while True:
            for key, _ in self.selector.select():
                if key.data == "sigchld":
                    while os.read(self.wake_r, 4096) == 4096:
                        pass
                    self.reap()
                elif not self.handle_request():
                    return

    def handle_request(self) -> bool:
        try:
            raw, fds, _, _ = socket.recv_fds(self.control, MAX_PACKET, FORK_FDS)
        except OSError:
            return False
        if not raw:
            for fd in fds:
                os.close(fd)
            return False  # the worker went away
        event = socket.socket(fileno=fds[0]) if fds else None
        try:
            request = json.loads(raw)["fork"]
            if len(fds) != FORK_FDS:
                raise ValueError(f"expected {FORK_FDS} fds, got {len(fds)}")
            if (threads := _threads()) != 1:
                raise RuntimeError(f"refusing to fork with {threads} threads (fork-unsafe)")
            sys.stdout.flush()
            sys.stderr.flush()
            zygote_pid = os.getpid()
            pid = os.fork()
        except Exception as exc:
            if event is not None:
                _send(event, {"error": f"{type(exc).__name__}: {exc}"})
                event.close()
            for fd in fds[1:]:
                os.close(fd)
            return True
        if pid == 0:
            _become_child(request, fds, zygote_pid)
        for fd in fds[1:]:
            os.close(fd)
        self.children[pid] = event
        _send(event, {"pid": pid})
        return True

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            event = self.children.pop(pid, None)
            if event is not None:
                _send(event, {"status": status})
                event.close()

    def shutdown(self) -> None:
        for pid in list(self.children):
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        self.reap()


# --- the worker's side ---------------------------------------------------------------------------

START_TIMEOUT_S = 300.0  # imports on a loaded host: seconds to a minute
REPLY_TIMEOUT_S = 30.0


class ZygoteUnavailable(RuntimeError):
    pass


class ForkedChild:
    """A child forked by the zygote, as the worker sees it: a pid, and messages on its event socket."""

    def __init__(self, events: socket.socket):
        self.events = events
        self.pid = 0
        self.sandboxed = False
        self.returncode: int | None = None
        self.lost = False  # the zygote died before reporting this child's exit status
        self._pidfd: int | None = None

    def _absorb(self, timeout: float | None) -> bool:
        """Read one message (False on timeout); EOF means the zygote is gone."""
        self.events.settimeout(timeout)
        try:
            raw = self.events.recv(MAX_PACKET)
        except TimeoutError:
            return False
        except OSError:
            raw = b""
        if not raw:
            self.lost = True
            return True
        message = json.loads(raw)
        if "error" in message:
            raise ZygoteUnavailable(f"the zygote could not fork: {message['error']}")
        if "pid" in message:
            self.pid = int(message["pid"])
            try:
                self._pidfd = os.pidfd_open(self.pid)  # to see its end even if the zygote dies
            except OSError:
                pass
        self.sandboxed |= bool(message.get("sandboxed"))
        if "status" in message:
            self.returncode = os.waitstatus_to_exitcode(int(message["status"]))
        return True

    def _done(self) -> bool:
        return self.returncode is not None or self.lost

    def wait_started(self, timeout: float = REPLY_TIMEOUT_S) -> None:
        """Until the pid is known and the child's sandbox is in place (or it already ended)."""
        deadline = time.monotonic() + timeout
        while not (self.pid and (self.sandboxed or self._done())):
            if self.lost and not self.pid:
                raise ZygoteUnavailable("the zygote died before it forked")
            if not self._absorb(max(deadline - time.monotonic(), 0.001)):
                raise ZygoteUnavailable(f"no reply from the zygote within {timeout:g} s")

    def wait(self, timeout: float | None) -> bool:
        """True once the child has exited (its status known, or the zygote lost and the pid gone)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._done():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            if not self._absorb(left):
                return False
        if self.lost and self.returncode is None and self._pidfd is not None:
            left = None if deadline is None else max(deadline - time.monotonic(), 0)
            if not select.select([self._pidfd], [], [], left)[0]:
                return False
        return True

    def close(self) -> None:
        self.events.close()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


class ZygoteClient:
    """Starts a zygote with the given environment and asks it for children."""

    def __init__(self, env: dict[str, str]):
        self.env = dict(env)
        self.home = tempfile.mkdtemp(prefix="kt-zygote-", dir=run_root())
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.control = ours
        self.log = tempfile.TemporaryFile()  # its stderr, read back only if it fails to start
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-P", "-m", "workers.zygote", str(theirs.fileno()), self.home],
                pass_fds=(theirs.fileno(),), env={**env, "HOME": self.home}, cwd=self.home,
                stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, start_new_session=True)
        finally:
            theirs.close()
        try:
            self.hello = self._await_hello()
        except BaseException:
            self.stop()
            raise

    def _await_hello(self) -> dict[str, Any]:
        self.control.settimeout(START_TIMEOUT_S)
        try:
            raw = self.control.recv(MAX_PACKET)
        except (TimeoutError, OSError) as exc:
            raise ZygoteUnavailable(f"zygote did not start: {exc}; {self._log_tail()}") from None
        finally:
            self.control.settimeout(None)
        if not raw:
            raise ZygoteUnavailable(f"zygote exited during start: {self._log_tail()}")
        message = json.loads(raw)
        hello = message.get("hello")
        if hello is None:
            raise ZygoteUnavailable(f"zygote failed to start: {message.get('failed', message)}")
        if hello["threads"] != 1 or hello["cuda_initialized"]:
            raise ZygoteUnavailable(f"zygote is not fork-safe: {hello}")
        return hello

    def _log_tail(self) -> str:
        self.log.seek(0)
        return self.log.read()[-4000:].decode(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def fork(self, request: dict[str, Any], fds: tuple[int, int, int, int]) -> ForkedChild:
        """fds: the child's stdin, stdout, stderr and result pipe ends (the caller keeps and closes them)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        child = ForkedChild(ours)
        try:
            try:
                socket.send_fds(self.control, [json.dumps({"fork": request}).encode()], [theirs.fileno(), *fds])
            except OSError as exc:
                raise ZygoteUnavailable(f"zygote unreachable: {exc}") from None
            finally:
                theirs.close()
            child.wait_started()
        except BaseException:
            if child.pid:
                try:
                    os.killpg(child.pid, signal.SIGKILL)
                except OSError:
                    pass
            child.close()
            raise
        return child

    def stop(self) -> None:
        self.control.close()  # EOF: the zygote kills its children's groups and exits
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.home, ignore_errors=True)


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    os.set_inheritable(control.fileno(), False)
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # the worker, not a terminal, decides when we stop
    try:
        hello = _preload()
    except BaseException:
        _send(control, {"failed": traceback.format_exc()[-4000:]})
        raise
    zygote = _Zygote(control)
    _send(control, {"hello": hello})
    try:
        zygote.serve()
    finally:
        zygote.shutdown()
        if len(sys.argv) > 2:  # our HOME: removed here too, since a killed worker never cleans it
            shutil.rmtree(sys.argv[2], ignore_errors=True)


if __name__ == "__main__":
    main()
