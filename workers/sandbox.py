"""The worker's side of an evaluation: one fresh ``python -m workers.child`` per run.

Public API (the Celery task calls only this):  ``evaluate(spec, data_dir=...) -> RunResult``.
Never raises for anything the variant does; a fault of the harness itself becomes verdict ``error``.

The child gets: a private temporary working directory (its HOME, deleted after), an environment
scrubbed to an allow-list, resource limits, its own network namespace where the kernel allows
(recorded as sandbox.network_isolated), and a process group we kill whole at the end.
"""

from __future__ import annotations

import ctypes
import hmac
import json
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
from typing import Callable

from workers.fingerprint import read_bandwidth_cache, store_bandwidth
from workers.protocol import RunResult, RunSpec, SandboxInfo, Verdict

REPO_ROOT = Path(__file__).resolve().parents[1]
CLONE_NEWNET = 0x40000000
ENV_NAMES = ("PATH", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "CUDA_HOME", "LANG", "LC_ALL", "TZ")
ENV_PREFIXES = ("TRITON_", "CUTE_DSL_")
_SECRETISH = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL|AUTH|_URL$|_DSN$", re.I)
LOG_HEAD, LOG_TAIL = 4 << 10, 12 << 10
MAX_RESULT_BYTES = 64 << 20
KILL_GRACE_S = 5.0

_libc = ctypes.CDLL(None, use_errno=True)  # loaded here: preexec must not import or dlopen


def evaluate(spec: RunSpec, *, data_dir: Path) -> RunResult:
    started = datetime.now(timezone.utc)
    try:
        return _evaluate(spec, Path(data_dir), started)
    except Exception:
        return RunResult(run_id=spec.run_id, verdict=Verdict.error, reason_code="harness_error",
                         reason=traceback.format_exc()[-4000:], started_at=started,
                         finished_at=datetime.now(timezone.utc))


def child_environment(workdir: str, data_dir: Path, spec: RunSpec) -> dict[str, str]:
    """An allow-list, never the worker's environment: no DB or broker URLs, no tokens."""
    env = {k: v for k, v in os.environ.items()
           if (k in ENV_NAMES or k.startswith(ENV_PREFIXES)) and not _SECRETISH.search(k) and "@" not in v}
    cache = data_dir / "compile-cache"
    pythonpath = [str(REPO_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update({
        "HOME": workdir, "TMPDIR": os.path.join(workdir, "tmp"), "PYTHONPATH": os.pathsep.join(pythonpath),
        "KT_COMPILE_CACHE": str(cache), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": str(spec.bench.cpu_threads),
    })
    env.setdefault("PATH", os.defpath)
    if not spec.device.startswith("cuda"):
        # Triton decides at @triton.jit time (variant import) whether a kernel is interpreted.
        env["TRITON_INTERPRET"] = "1"
    return env


def resource_limits(spec: RunSpec) -> dict[int, int]:
    limits = {
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_NOFILE: 1024,
        resource.RLIMIT_NPROC: 4096,  # threads count too (torch, Triton's compile pool)
        resource.RLIMIT_FSIZE: 2 << 30,
        resource.RLIMIT_CPU: int(spec.timeout_s * max(os.cpu_count() or 1, 1)) + 30,
    }
    if not spec.device.startswith("cuda"):  # CUDA maps huge virtual ranges: no address-space cap there
        limits[resource.RLIMIT_AS] = spec.memory_limit_mb << 20
    return limits


def _preexec(limits: dict[int, int]) -> Callable[[], None]:
    def run() -> None:  # in the forked child, before exec: only syscalls
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

    def text(self) -> str:
        gap = f"\n[... {self.dropped} bytes dropped ...]\n" if self.dropped else ""
        return (bytes(self.head).decode(errors="replace") + gap + bytes(self.tail).decode(errors="replace"))


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _evaluate(spec: RunSpec, data_dir: Path, started: datetime) -> RunResult:
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "compile-cache").mkdir(exist_ok=True)
    workdir = tempfile.mkdtemp(prefix=f"kt-run-{re.sub(r'[^A-Za-z0-9_-]', '_', spec.run_id)[:32]}-")
    os.makedirs(os.path.join(workdir, "tmp"))
    token = secrets.token_bytes(32)
    limits = resource_limits(spec)
    handshake = json.dumps({"spec": spec.model_dump(mode="json"), "token": token.hex(),
                            "bandwidth_cache": read_bandwidth_cache(data_dir)}).encode()
    r_fd, w_fd = os.pipe()
    try:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "workers.child", str(w_fd)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(w_fd,),
            cwd=workdir, env=child_environment(workdir, data_dir, spec), start_new_session=True,
            preexec_fn=_preexec(limits))
    except BaseException:
        os.close(r_fd)
        os.close(w_fd)
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    os.close(w_fd)
    try:
        isolated = _netns(proc.pid) not in (None, _netns(os.getpid()))
        result_reader = _Capture(r_fd, keep_all=True)
        out, err = _Capture(proc.stdout.fileno(), False), _Capture(proc.stderr.fileno(), False)
        for t in (result_reader, out, err):
            t.start()
        writer = threading.Thread(target=_feed, args=(proc, handshake), daemon=True)
        writer.start()
        timed_out = False
        try:
            proc.wait(timeout=spec.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid)
            proc.wait()
        wall = time.monotonic() - t0
        _kill_group(proc.pid)  # stragglers the variant left in its group
        for t in (result_reader, out, err):
            t.join(KILL_GRACE_S)
    finally:
        os.close(r_fd)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        shutil.rmtree(workdir, ignore_errors=True)

    sig = signal.Signals(-proc.returncode).name if proc.returncode is not None and proc.returncode < 0 else None
    info = SandboxInfo(network_isolated=isolated, exit_code=proc.returncode, signal=sig,
                       limits={resource_name(k): v for k, v in limits.items()},
                       stdout=out.text(), stderr=err.text())
    result = _verdict(spec, started, timed_out, proc.returncode, sig, token, result_reader, info)
    result.sandbox = info
    result.child_wall_s = wall
    result.finished_at = datetime.now(timezone.utc)
    if result.bandwidth_measured and result.fingerprint.get("bandwidth_key"):
        store_bandwidth(data_dir, result.fingerprint["bandwidth_key"], result.fingerprint["bandwidth_gbs"],
                        result.fingerprint)
    return result


def _feed(proc: subprocess.Popen, data: bytes) -> None:
    try:
        proc.stdin.write(data)
        proc.stdin.close()
    except (BrokenPipeError, OSError, ValueError):
        pass  # the child died before reading: its exit status tells why


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


def _verdict(spec: RunSpec, started: datetime, timed_out: bool, rc: int | None, sig: str | None, token: bytes,
             reader: _Capture, info: SandboxInfo) -> RunResult:
    def fail(verdict: Verdict, code: str, reason: str) -> RunResult:
        return RunResult(run_id=spec.run_id, verdict=verdict, reason_code=code, reason=reason, started_at=started)

    stderr_tail = "\n".join(info.stderr.strip().splitlines()[-15:])
    if timed_out:
        return fail(Verdict.timeout, "wall_clock_limit", f"no verdict within {spec.timeout_s:g} s; process group killed")
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
