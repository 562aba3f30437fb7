"""The worker's side of an evaluation: one sandboxed child process per run.

Public API (the Celery task calls only this):  ``evaluate(spec, data_dir=...) -> RunResult``.
Never raises for anything the variant does; a fault of the harness itself becomes verdict ``error``.

The child gets: a private temporary working directory (its HOME, deleted after; workers/workdirs.py sweeps those
of a killed worker), an environment scrubbed to an allow-list, resource limits, its own network namespace where the
kernel allows (recorded as sandbox.network_isolated), and a session / process group we kill whole at the end.

How the child starts (KT_SANDBOX_MODE): ``zygote`` (default) forks it from this worker's long-lived
template process (workers/zygote.py), which has imported torch and the harness once, so a run does
not pay seconds of imports; ``spawn`` starts a fresh ``python -m workers.child``. If the zygote cannot
be started or reached (twice), the run falls back to spawn. Which one ran is recorded in
``sandbox.limits["sandbox_zygote"]`` (1 forked, 0 fresh interpreter).
"""

from __future__ import annotations

import atexit
import ctypes
import hmac
import json
import logging
import os
import re
import resource
import secrets
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from workers.fingerprint import read_bandwidth_cache, store_bandwidth
from workers.gpu_lock import lock_dir, read_wait_log
from workers.protocol import RunResult, RunSpec, SandboxInfo, Verdict
from workers.workdirs import run_root
from workers.zygote import CLONE_NEWNET, PR_SET_PDEATHSIG, ForkedChild, ZygoteClient, ZygoteUnavailable

REPO_ROOT = Path(__file__).resolve().parents[1]
ENV_NAMES = ("PATH", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "CUDA_HOME", "LANG", "LC_ALL", "TZ")
ENV_PREFIXES = ("TRITON_", "CUTE_DSL_")
_SECRETISH = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL|AUTH|_URL$|_DSN$", re.I)
LOG_HEAD, LOG_TAIL = 4 << 10, 12 << 10
MAX_RESULT_BYTES = 64 << 20
KILL_GRACE_S = 5.0
KILL_WAIT_S = 30.0  # for a SIGKILLed child's exit status
LOCK_WAIT_LOG = "device-lock-wait"  # in the run's workdir: workers/gpu_lock.py writes it
LOCK_WAIT_CAP = 3.0  # a run's limit grows by its device-lock waits, up to this many times the limit
# A timed-out child's faulthandler dump: usually there in milliseconds, but a child deep in a
# multi-GB host copy (session H's MoE runs) answered nothing within a fixed 1 s; wait until the
# dump is complete, up to this long.
STACK_DUMP_WAIT_S = 5.0
DEFAULT_FSIZE_MB = 2048  # RLIMIT_FSIZE per file; KT_SANDBOX_FSIZE_MB overrides
NPROC_HEADROOM = 512
ZYGOTE_RETRY_S = 300.0  # after a failed zygote start, spawn for this long before trying again
MODE_KEY = "sandbox_zygote"

log = logging.getLogger("kerneltune.sandbox")

_libc = ctypes.CDLL(None, use_errno=True)  # loaded here: preexec must not import or dlopen


def evaluate(spec: RunSpec, *, data_dir: Path) -> RunResult:
    started = datetime.now(timezone.utc)
    try:
        return _evaluate(spec, Path(data_dir), started)
    except Exception:
        return RunResult(run_id=spec.run_id, verdict=Verdict.error, reason_code="harness_error",
                         reason=traceback.format_exc()[-4000:], started_at=started,
                         finished_at=datetime.now(timezone.utc))


def sandbox_mode() -> str:
    mode = os.environ.get("KT_SANDBOX_MODE", "zygote")
    if mode not in ("zygote", "spawn"):
        raise ValueError(f"KT_SANDBOX_MODE must be 'zygote' or 'spawn', not {mode!r}")
    return mode


def allowed_environment() -> dict[str, str]:
    """This process's environment cut to the allow-list a child running submitted code may see: no DB or broker
    URLs, no tokens."""
    return {k: v for k, v in os.environ.items()
            if (k in ENV_NAMES or k.startswith(ENV_PREFIXES)) and not _SECRETISH.search(k) and "@" not in v}


def _base_environment(data_dir: Path, device: str) -> dict[str, str]:
    """What every child of this worker shares (and a zygote is started with)."""
    env = allowed_environment()
    cache = data_dir / "compile-cache"
    pythonpath = [str(REPO_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update({"PYTHONPATH": os.pathsep.join(pythonpath), "KT_COMPILE_CACHE": str(cache),
                "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"})
    env.setdefault("PATH", os.defpath)
    if not device.startswith("cuda"):
        # Triton decides at @triton.jit time (variant import) whether a kernel is interpreted, and a
        # zygote imports triton itself: the variable must be there when the interpreter starts.
        env["TRITON_INTERPRET"] = "1"
    return env


def child_environment(workdir: str, data_dir: Path, spec: RunSpec) -> dict[str, str]:
    """An allow-list, never the worker's environment: no DB or broker URLs, no tokens."""
    env = _base_environment(data_dir, spec.device)
    env.update({"HOME": workdir, "TMPDIR": os.path.join(workdir, "tmp"),
                "OMP_NUM_THREADS": str(spec.bench.cpu_threads)})
    return env


def zygote_environment(data_dir: Path, device: str) -> dict[str, str]:
    # One thread in the zygote (fork safety): OpenBLAS starts its pool at numpy import unless told
    # otherwise. Children set their own thread count (torch.set_num_threads in the pipeline).
    return {**_base_environment(data_dir, device), "OMP_NUM_THREADS": "1"}


def _tasks_of(uid: int) -> int:
    """Processes and threads of ``uid`` now: what RLIMIT_NPROC counts."""
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry.name}/task"))
            except OSError:
                pass
    return count


def resource_limits(spec: RunSpec) -> dict[int, int]:
    fsize_mb = int(os.environ.get("KT_SANDBOX_FSIZE_MB", DEFAULT_FSIZE_MB))
    limits = {
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_NOFILE: 1024,
        # Relative to what this uid runs now: room for torch's and Triton's threads, not a fork
        # bomb. Root ignores RLIMIT_NPROC; there the audit hook's refusal of os.fork is the guard.
        resource.RLIMIT_NPROC: _tasks_of(os.getuid()) + NPROC_HEADROOM,
        resource.RLIMIT_FSIZE: fsize_mb << 20,
        resource.RLIMIT_CPU: int(spec.timeout_s * max(os.cpu_count() or 1, 1)) + 30,
    }
    if not spec.device.startswith("cuda"):  # CUDA maps huge virtual ranges: no address-space cap there
        limits[resource.RLIMIT_AS] = spec.memory_limit_mb << 20
    return limits


def limited_preexec(limits: dict[int, int]) -> Callable[[], None]:
    def run() -> None:  # in the forked child, before exec: only syscalls
        # Dies with the thread that started it (the evaluating one, alive until the child ends):
        # a SIGKILLed worker leaves no sandbox child running on the device.
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        for which, value in limits.items():
            _, hard = resource.getrlimit(which)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (value, value))
        _libc.unshare(CLONE_NEWNET)  # fails without CAP_SYS_ADMIN: recorded, not fatal
    return run


class _Capture(threading.Thread):
    """Drains one pipe (the caller closes it); keeps a log's head and tail, or all (bounded) of the result."""

    def __init__(self, fd: int, keep_all: bool):
        super().__init__(daemon=True)
        self.fd, self.keep_all = fd, keep_all
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0
        self.overflow = False

    def run(self) -> None:
        try:
            while chunk := os.read(self.fd, 1 << 16):
                if self.keep_all:
                    if len(self.head) + len(chunk) > MAX_RESULT_BYTES:
                        self.overflow = True
                        continue
                    self.head += chunk
                    continue
                room = LOG_HEAD - len(self.head)
                self.head += chunk[:max(room, 0)]
                self.tail += chunk[max(room, 0):]
                if len(self.tail) > LOG_TAIL:
                    self.dropped += len(self.tail) - LOG_TAIL
                    del self.tail[:-LOG_TAIL]
        except OSError:
            pass

    def received(self) -> int:
        """Bytes read from the pipe so far, kept or dropped."""
        return len(self.head) + len(self.tail) + self.dropped

    def text(self) -> str:
        gap = f"\n[... {self.dropped} bytes dropped ...]\n" if self.dropped else ""
        return (bytes(self.head).decode(errors="replace") + gap + bytes(self.tail).decode(errors="replace"))


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class _Spawned:
    """A fresh ``python -m workers.child`` (KT_SANDBOX_MODE=spawn, or the zygote unavailable)."""

    zygote = False
    lost = False

    def __init__(self, env: dict[str, str], workdir: str, limits: dict[int, int], fds: tuple[int, int, int, int]):
        stdin, stdout, stderr, result = fds
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "workers.child", str(result)], stdin=stdin, stdout=stdout, stderr=stderr,
            pass_fds=(result,), cwd=workdir, env=env, start_new_session=True, preexec_fn=limited_preexec(limits))
        self.pid = self.proc.pid

    def wait(self, timeout: float | None) -> bool:
        try:
            self.proc.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def close(self) -> None:
        pass


class _Forked:
    """A child forked by this worker's zygote, its sandbox applied before the spec is read."""

    zygote = True

    def __init__(self, env: dict[str, str], workdir: str, limits: dict[int, int], fds: tuple[int, int, int, int],
                 data_dir: Path, device: str):
        request = {"env": env, "workdir": workdir, "limits": sorted(limits.items())}
        self.child = _fork_from_zygote(zygote_environment(data_dir, device), request, fds)
        self.pid = self.child.pid

    def wait(self, timeout: float | None) -> bool:
        return self.child.wait(timeout)

    @property
    def returncode(self) -> int | None:
        return self.child.returncode

    @property
    def lost(self) -> bool:
        return self.child.lost

    def close(self) -> None:
        self.child.close()


_zygote: ZygoteClient | None = None
_zygote_lock = threading.Lock()
_zygote_failed: dict[tuple[tuple[str, str], ...], float] = {}  # env key -> when it last failed to start


def _fork_from_zygote(env: dict[str, str], request: dict[str, Any], fds: tuple[int, int, int, int]) -> ForkedChild:
    """Fork from the zygote for this environment, (re)starting it as needed: one retry with a fresh one."""
    global _zygote
    key = tuple(sorted(env.items()))
    for attempt in range(2):
        with _zygote_lock:
            if _zygote is not None and (_zygote.env != env or not _zygote.alive()):
                _zygote.stop()
                _zygote = None
            if _zygote is None:
                if time.monotonic() - _zygote_failed.get(key, -ZYGOTE_RETRY_S) < ZYGOTE_RETRY_S:
                    raise ZygoteUnavailable("the zygote failed to start recently")
                try:
                    _zygote = ZygoteClient(env)
                except ZygoteUnavailable:
                    _zygote_failed[key] = time.monotonic()
                    raise
            zygote = _zygote
        try:
            return zygote.fork(request, fds)
        except ZygoteUnavailable:
            with _zygote_lock:
                if _zygote is zygote:
                    _zygote.stop()
                    _zygote = None
            if attempt:
                raise
    raise AssertionError("unreachable")


def stop_zygote() -> None:
    """Stop this worker's zygote (atexit; tests). The next zygote evaluation starts a new one."""
    global _zygote
    with _zygote_lock:
        if _zygote is not None:
            _zygote.stop()
            _zygote = None


atexit.register(stop_zygote)


def warm_zygote(data_dir: Path, device: str) -> bool:
    """Start the zygote ahead of the first evaluation (e.g. from Celery's worker_process_init), so
    no run waits for its imports. False if it could not be started (runs will use spawn)."""
    global _zygote
    env = zygote_environment(Path(data_dir), device)
    with _zygote_lock:
        if _zygote is not None and _zygote.env == env and _zygote.alive():
            return True
        if _zygote is not None:
            _zygote.stop()
            _zygote = None
        try:
            _zygote = ZygoteClient(env)
        except ZygoteUnavailable as exc:
            log.warning("zygote unavailable: %s", exc)
            return False
    return True


def zygote_pid() -> int | None:
    with _zygote_lock:
        return _zygote.proc.pid if _zygote is not None and _zygote.alive() else None


def _launch(spec: RunSpec, data_dir: Path, workdir: str, limits: dict[int, int],
            fds: tuple[int, int, int, int]) -> _Spawned | _Forked:
    env = child_environment(workdir, data_dir, spec)
    if sandbox_mode() == "zygote":
        try:
            return _Forked(env, workdir, limits, fds, data_dir, spec.device)
        except ZygoteUnavailable as exc:
            log.warning("zygote unavailable, evaluating %s in a fresh interpreter: %s", spec.run_id, exc)
    return _Spawned(env, workdir, limits, fds)


def _evaluate(spec: RunSpec, data_dir: Path, started: datetime) -> RunResult:
    data_dir.mkdir(parents=True, exist_ok=True)
    cache = data_dir / "compile-cache"
    cache.mkdir(exist_ok=True)
    workdir = tempfile.mkdtemp(prefix=f"kt-run-{re.sub(r'[^A-Za-z0-9_-]', '_', spec.run_id)[:32]}-", dir=run_root())
    os.makedirs(os.path.join(workdir, "tmp"))
    token = secrets.token_bytes(32)
    wait_log = os.path.join(workdir, LOCK_WAIT_LOG)
    limits = resource_limits(spec)
    handshake = json.dumps({"spec": spec.model_dump(mode="json"), "token": token.hex(),
                            "bandwidth_cache": read_bandwidth_cache(data_dir),
                            "device_lock": str(lock_dir(data_dir, spec.device)),
                            "lock_wait_log": wait_log,
                            "filesystem": {"protected": [str(data_dir)], "writable": [workdir, str(cache)]}}).encode()
    pipes = [os.pipe() for _ in range(4)]  # stdin, stdout, stderr, result: (read, write)
    child_ends = (pipes[0][0], pipes[1][1], pipes[2][1], pipes[3][1])
    our_ends = (pipes[0][1], pipes[1][0], pipes[2][0], pipes[3][0])
    child: _Spawned | _Forked | None = None
    fed = False
    try:
        t0 = time.monotonic()
        try:
            child = _launch(spec, data_dir, workdir, limits, child_ends)
        finally:
            for fd in child_ends:
                os.close(fd)
        isolated = _netns(child.pid) not in (None, _netns(os.getpid()))
        result_reader = _Capture(our_ends[3], keep_all=True)
        out, err = _Capture(our_ends[1], False), _Capture(our_ends[2], False)
        for t in (result_reader, out, err):
            t.start()
        threading.Thread(target=_feed, args=(our_ends[0], handshake), daemon=True).start()
        fed = True  # the feeder closes the stdin end
        timed_out, lock_wait = _wait_for(child, spec.timeout_s, t0, wait_log)
        if timed_out:
            _dump_stacks(child.pid, err)
            _kill_group(child.pid)
            child.wait(KILL_WAIT_S)
        wall = time.monotonic() - t0
        _kill_group(child.pid)  # stragglers the variant left in its group
        for t in (result_reader, out, err):
            t.join(KILL_GRACE_S)
    finally:
        for fd in our_ends[int(fed):]:
            os.close(fd)
        if child is not None:
            child.close()
        shutil.rmtree(workdir, ignore_errors=True)

    rc = child.returncode
    sig = signal.Signals(-rc).name if rc is not None and rc < 0 else None
    info = SandboxInfo(network_isolated=isolated, exit_code=rc, signal=sig,
                       limits={**{resource_name(k): v for k, v in limits.items()}, MODE_KEY: int(child.zygote)},
                       stdout=out.text(), stderr=err.text())
    info.lock_wait_s = round(lock_wait, 3)
    result = _verdict(spec, started, timed_out, rc, sig, token, result_reader, info, child.lost)
    result.sandbox = info
    result.child_wall_s = wall
    result.finished_at = datetime.now(timezone.utc)
    if result.bandwidth_measured and result.fingerprint.get("bandwidth_key"):
        store_bandwidth(data_dir, result.fingerprint["bandwidth_key"], result.fingerprint["bandwidth_gbs"],
                        result.fingerprint)
    return result


def _wait_for(child: _Spawned | _Forked, timeout_s: float, t0: float, wait_log: str) -> tuple[bool, float]:
    """Wait for the child until ``timeout_s`` of its own time has passed: time it spent queued for the
    device behind other runs (as its lock recorded it) extends the limit, up to LOCK_WAIT_CAP x the
    limit, so a slow neighbour does not earn this variant a timeout, and a variant that writes the
    log itself cannot run for ever. Returns (timed out, seconds waited for the device)."""
    granted = 0.0  # the extension so far
    while True:
        left = t0 + timeout_s + granted - time.monotonic()
        if left > 0 and child.wait(left):
            return False, read_wait_log(wait_log)
        waited = read_wait_log(wait_log)
        if min(waited, LOCK_WAIT_CAP * timeout_s) <= granted + 0.01:
            return True, waited
        granted = min(waited, LOCK_WAIT_CAP * timeout_s)


def _dump_stacks(pid: int, err: _Capture) -> None:
    """Ask a child past its limit for its Python stacks (faulthandler on SIGUSR1, see workers/child.py)
    and wait until they are on its stderr (a dump header, then no new output for 0.2 s) before the
    group is killed; at most STACK_DUMP_WAIT_S."""
    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError:
        return
    deadline = time.monotonic() + STACK_DUMP_WAIT_S
    seen, size = False, -1
    while time.monotonic() < deadline:
        time.sleep(0.1 if not seen else 0.2)
        now = err.received()
        if seen and now == size:
            return
        seen = seen or "most recent call first" in err.text()[-20_000:]
        size = now


def _feed(fd: int, data: bytes) -> None:
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        pass  # the child died before reading: its exit status tells why
    finally:
        os.close(fd)


def _netns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def resource_name(which: int) -> str:
    for name in dir(resource):
        if name.startswith("RLIMIT_") and getattr(resource, name) == which:
            return name
    return str(which)


def _stderr_tail(stderr: str) -> str:
    """The last lines of stderr; from faulthandler's header when there is one (its stack and module
    list can be longer than the tail, more so under the zygote's extra frames)."""
    lines = stderr.strip().splitlines()
    fatal = [i for i, line in enumerate(lines) if line.startswith("Fatal Python error")]
    start = fatal[-1] if fatal and len(lines) - fatal[-1] <= 40 else len(lines) - 15
    return "\n".join(lines[max(start, 0):])


def _stuck_at(stderr: str) -> str:
    """The innermost frames of the main thread from faulthandler's dump (most recent call first)."""
    lines = stderr.strip().splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith(("Current thread", "Thread 0x"))]
    main = next((i for i in reversed(heads) if lines[i].startswith("Current thread")), heads[-1] if heads else None)
    if main is None:
        return ""
    frames = []
    for line in lines[main + 1:]:
        if not line.startswith("  File "):
            break
        frames.append(line.strip())
    return "\n".join(frames[:8])


def _verdict(spec: RunSpec, started: datetime, timed_out: bool, rc: int | None, sig: str | None, token: bytes,
             reader: _Capture, info: SandboxInfo, lost: bool = False) -> RunResult:
    def fail(verdict: Verdict, code: str, reason: str) -> RunResult:
        return RunResult(run_id=spec.run_id, verdict=verdict, reason_code=code, reason=reason, started_at=started)

    stderr_tail = _stderr_tail(info.stderr)
    if lost:  # the zygote died under a running child (a variant can kill its parent through ctypes)
        return fail(Verdict.crashed, "sandbox_lost",
                    f"the zygote died while the child ran; its result is not trusted\n{stderr_tail}")
    if timed_out:
        where = _stuck_at(info.stderr)
        queued = f" (plus {info.lock_wait_s:.1f} s waiting for the device)" if info.lock_wait_s >= 0.1 else ""
        return fail(Verdict.timeout, "wall_clock_limit", f"no verdict within {spec.timeout_s:g} s{queued}; process group killed"
                    + (f"; it was at:\n{where}" if where else ""))
    raw = bytes(reader.head)
    if not raw:
        if sig == "SIGXCPU":
            return fail(Verdict.timeout, "cpu_time_limit", f"CPU-time limit reached\n{stderr_tail}")
        if sig:
            return fail(Verdict.crashed, f"signal_{sig}", f"child killed by {sig}\n{stderr_tail}")
        if rc:
            return fail(Verdict.crashed, f"exit_{rc}", f"child exited with status {rc} without a result\n{stderr_tail}")
        return fail(Verdict.crashed, "no_result", f"child exited cleanly without a result\n{stderr_tail}")
    head = len(token) + 8
    if reader.overflow or len(raw) < head or not hmac.compare_digest(raw[:len(token)], token):
        return fail(Verdict.rejected, "forged_result", "the result channel carried bytes the harness did not write")
    (length,) = struct.unpack(">Q", raw[len(token):head])
    if len(raw) != head + length:
        return fail(Verdict.rejected, "forged_result", "extra or missing bytes on the result channel")
    return RunResult.model_validate_json(raw[head:])
