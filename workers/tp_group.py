"""Multi-process TP evaluation: one process per rank, checked and timed as a group.

Public API (a Celery task calls only this): ``evaluate_tp(spec, world_size, device) -> TPRunResult``.
Never raises for anything the variant does; a fault of the harness is verdict ``error``.

Processes. The worker starts ONE launcher (``python -P -m workers.tp_group``) in a new session;
it imports torch and the harness once and forks the ``world_size`` ranks, which stay in its process
group: ``killpg`` of the launcher ends every rank and anything they started, in one call. Forking
from a single-threaded launcher that never ran a torch op (nor touched CUDA) is safe (the same
argument as workers/zygote.py) and costs one torch import per group instead of one per rank.

Ranks. torch.distributed over a FileStore in the run's private directory (no TCP port to pick or
race for): gloo on the CPU, NCCL on GPUs (rank r on cuda:r). Each rank builds the full problem from
the run's seed, keeps its shard, checks the TP stock path once (harness sanity), then the variant:
poisoned outputs, inputs hashed around the call, every output compared bitwise across ranks, each
rank's outputs checked against the single-device reference of the full problem (computed after the
call), a new-inputs trial that must change the outputs. Then the group is timed: variant and stock
interleaved over rotating input sets; on GPUs one CUDA graph per implementation (collectives
captured in it) replayed between events after a barrier, on the CPU wall-clock around each call
after a barrier; the group's time per round is its slowest rank's. Samples and fingerprints are
gathered to rank 0, whose record is the group's.

Verdicts. Each rank writes its record to its own pipe (token-framed, as workers/child.py), so a
rank that fails while the others wait in a collective is heard at once: the parent gives the
others a moment to report, kills the group and names the culprit. A rank that dies without a
record is ``crashed`` (its signal or exit status); no verdict within the limit is ``timeout``
naming the ranks still running. Nothing of the group outlives the call.

Multicast stays off in every process (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1): the GPU hosts forbid NVLink multicast.
"""

from __future__ import annotations

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
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

from workers.protocol import RunSpec, Verdict
from workers.tp_protocol import RankReport, TPRunResult, TPRunSpec
from workers.workdirs import run_root

REPO_ROOT = Path(__file__).resolve().parents[1]
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
ENV_NAMES = ("PATH", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "CUDA_HOME", "LANG", "LC_ALL", "TZ")
ENV_PREFIXES = ("TRITON_", "CUTE_DSL_", "NCCL_", "GLOO_", "TORCH_NCCL_")
_SECRETISH = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL|AUTH|_URL$|_DSN$", re.I)
REPORT_GRACE_S = 1.5     # after a rank fails: time for the others to report before the group is killed
POLL_S = 0.05
LOG_TAIL = 4000
MAX_RESULT_BYTES = 16 << 20
PEER_LOST = "peer_lost"  # a rank failed because another one went away: never the culprit


# ================================================================================================
# Worker side
# ================================================================================================

def evaluate_tp(spec: RunSpec, world_size: int, device: str = "cpu", *,
                timeout_s: float | None = None) -> TPRunResult:
    """Evaluate ``spec`` (a variant of a slot with a TP form) on ``world_size`` ranks of ``device``
    ("cpu": gloo; "cuda": NCCL, one GPU per rank). The wall-clock limit is ``timeout_s`` or the
    spec's, for the whole group including start-up."""
    started = datetime.now(timezone.utc)
    try:
        tp = TPRunSpec(run=spec, world_size=world_size, device="cuda" if device.startswith("cuda") else "cpu")
        problem = _validate(tp)
        if problem:
            return _fail(tp.run, world_size, started, Verdict.error, "bad_tp_request", problem)
        return _run_group(tp, started, timeout_s if timeout_s is not None else spec.timeout_s)
    except Exception:
        return _fail(spec, world_size, started, Verdict.error, "harness_error", traceback.format_exc()[-4000:])


def _fail(spec: RunSpec, world: int, started: datetime, verdict: Verdict, code: str, reason: str,
          ranks: list[RankReport] | None = None) -> TPRunResult:
    return TPRunResult(run_id=spec.run_id, verdict=verdict, reason_code=code, reason=reason, started_at=started,
                       finished_at=datetime.now(timezone.utc), world_size=world, ranks=ranks or [])


def _validate(tp: TPRunSpec) -> str:
    from kernels.slots.base import Shape
    from kernels.tp import get_tp_slot

    try:
        get_tp_slot(tp.run.slot).validate(Shape.from_json(tp.run.shape), tp.world_size)
    except (KeyError, ValueError) as exc:
        return str(exc)
    if tp.device == "cuda":
        import torch
        n = torch.cuda.device_count()  # NVML: does not create a context in the worker
        if n < tp.world_size:
            return f"{tp.world_size} ranks need {tp.world_size} GPUs; this host has {n}"
    return ""


def group_environment(tp: TPRunSpec, workdir: str) -> dict[str, str]:
    """An allow-list (no DB or broker URLs, no tokens), the multicast guard, loopback-only gloo."""
    env = {k: v for k, v in os.environ.items()
           if (k in ENV_NAMES or k.startswith(ENV_PREFIXES)) and not _SECRETISH.search(k) and "@" not in v}
    pythonpath = [str(REPO_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update({"PYTHONPATH": os.pathsep.join(pythonpath), "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONUNBUFFERED": "1", "HOME": workdir, "TMPDIR": os.path.join(workdir, "tmp"),
                "OMP_NUM_THREADS": str(tp.run.bench.cpu_threads), **NO_MULTICAST})
    env.setdefault("PATH", os.defpath)
    if tp.device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # ranks talk over loopback only
    return env


class _Reader(threading.Thread):
    """Drains one pipe to EOF (bounded)."""

    def __init__(self, fd: int):
        super().__init__(daemon=True)
        self.fd = fd
        self.data = bytearray()
        self.overflow = False

    def run(self) -> None:
        try:
            while chunk := os.read(self.fd, 1 << 16):
                if len(self.data) + len(chunk) > MAX_RESULT_BYTES:
                    self.overflow = True
                    continue
                self.data += chunk
        except OSError:
            pass
        finally:
            os.close(self.fd)


class _StatusReader(threading.Thread):
    """The launcher's events, one JSON object per line: {"rank", "pid"} then {"rank", "status"}."""

    def __init__(self, fd: int):
        super().__init__(daemon=True)
        self.fd = fd
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.eof = False

    def run(self) -> None:
        buf = b""
        try:
            while chunk := os.read(self.fd, 1 << 14):
                buf += chunk
                *lines, buf = buf.split(b"\n")
                with self.lock:
                    self.events.extend(json.loads(line) for line in lines if line.strip())
        except (OSError, ValueError):
            pass
        finally:
            self.eof = True
            os.close(self.fd)

    def snapshot(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.events)


def _launcher_limits() -> None:  # preexec, in the launcher before exec: only syscalls
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _run_group(tp: TPRunSpec, started: datetime, timeout_s: float) -> TPRunResult:
    world = tp.world_size
    workdir = tempfile.mkdtemp(prefix=f"kt-tp-{re.sub(r'[^A-Za-z0-9_-]', '_', tp.run.run_id)[:24]}-", dir=run_root())
    os.makedirs(os.path.join(workdir, "tmp"))
    tokens = [secrets.token_bytes(32) for _ in range(world)]
    result_pipes = [os.pipe() for _ in range(world)]
    status_r, status_w = os.pipe()
    child_fds = [w for _, w in result_pipes] + [status_w]
    handshake = json.dumps({"tp": tp.model_dump(mode="json"), "tokens": [t.hex() for t in tokens],
                            "result_fds": [w for _, w in result_pipes], "status_fd": status_w,
                            "workdir": workdir, "rendezvous": os.path.join(workdir, "rendezvous")}).encode()
    launcher: subprocess.Popen[bytes] | None = None
    readers = [_Reader(r) for r, _ in result_pipes]
    status = _StatusReader(status_r)
    try:
        t0 = time.monotonic()
        with open(os.path.join(workdir, "launcher.log"), "wb") as log:
            try:
                launcher = subprocess.Popen([sys.executable, "-P", "-m", "workers.tp_group"], stdin=subprocess.PIPE,
                                            stdout=log, stderr=log, pass_fds=child_fds, cwd=workdir,
                                            env=group_environment(tp, workdir), start_new_session=True,
                                            preexec_fn=_launcher_limits)
            finally:
                for fd in child_fds:
                    os.close(fd)
        for t in (*readers, status):
            t.start()
        assert launcher.stdin is not None
        try:
            launcher.stdin.write(handshake)
            launcher.stdin.close()
        except OSError:
            pass  # the launcher died before reading: its exit tells why
        timed_out, failed_at = _watch(launcher, status, readers, tokens, world, t0 + timeout_s)
        wall = time.monotonic() - t0
        _kill_group(launcher.pid)
        launcher.wait()
        _wait_group_gone(launcher.pid)
        for t in (*readers, status):
            t.join(5.0)
        logs = {r: _tail(Path(workdir) / f"rank{r}.log") for r in range(world)}
        launcher_log = _tail(Path(workdir) / "launcher.log")
    finally:
        if launcher is not None and launcher.poll() is None:
            _kill_group(launcher.pid)
            launcher.wait()
        shutil.rmtree(workdir, ignore_errors=True)
    result = _merge(tp, started, wall, timeout_s, timed_out, failed_at, launcher.returncode, launcher_log,
                    status.snapshot(), [_decode(rd, tok) for rd, tok in zip(readers, tokens)], logs)
    result.group_pgid = launcher.pid
    return result


def _watch(launcher: subprocess.Popen[bytes], status: _StatusReader, readers: list[_Reader], tokens: list[bytes],
           world: int, deadline: float) -> tuple[bool, float | None]:
    """Wait until every rank exited, one failed (plus the grace), or the deadline. (timed_out, failed_at)."""
    failed_at: float | None = None
    while True:
        now = time.monotonic()
        exits = {e["rank"]: e["status"] for e in status.snapshot() if "status" in e}
        if len(exits) == world or (launcher.poll() is not None and status.eof):
            return False, failed_at
        if failed_at is None:
            for r, raw in exits.items():
                report = _decode(readers[r], tokens[r]) if not readers[r].is_alive() else None
                if raw != 0 or report is None or report.verdict != Verdict.passed:
                    failed_at = now  # a rank failed or died: the others may be stuck in a collective
                    break
        elif now - failed_at > REPORT_GRACE_S:
            return False, failed_at
        if now > deadline:
            return True, failed_at
        time.sleep(POLL_S)


def _decode(reader: _Reader, token: bytes) -> TPRunResult | None:
    raw = bytes(reader.data)
    head = len(token) + 8
    if reader.overflow or len(raw) < head or not hmac.compare_digest(raw[:len(token)], token):
        return None
    (length,) = struct.unpack(">Q", raw[len(token):head])
    if len(raw) != head + length:
        return None
    try:
        return TPRunResult.model_validate_json(raw[head:])
    except ValueError:
        return None


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes in process group ``pgid``."""
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            pids.append(int(entry.name))
    return pids


def _wait_group_gone(pgid: int, limit_s: float = 10.0) -> None:
    """SIGKILL is asynchronous: wait until no member of the group is left running."""
    end = time.monotonic() + limit_s
    while group_members(pgid) and time.monotonic() < end:
        _kill_group(pgid)
        time.sleep(POLL_S)


def _tail(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-LOG_TAIL:].decode(errors="replace")


def _describe_status(raw: int | None) -> tuple[int | None, str | None]:
    if raw is None:
        return None, None
    if os.WIFSIGNALED(raw):
        return None, signal.Signals(os.WTERMSIG(raw)).name
    return os.WEXITSTATUS(raw), None


def _merge(tp: TPRunSpec, started: datetime, wall: float, timeout_s: float, timed_out: bool, failed_at: float | None,
           launcher_rc: int | None, launcher_log: str, events: list[dict[str, Any]],
           records: list[TPRunResult | None], logs: dict[int, str]) -> TPRunResult:
    world = tp.world_size
    pids = {e["rank"]: e["pid"] for e in events if "pid" in e}
    exits = {e["rank"]: e["status"] for e in events if "status" in e}
    ranks = []
    for r in range(world):
        rec = records[r]
        code, sig = _describe_status(exits.get(r))
        ranks.append(RankReport(rank=r, pid=pids.get(r), verdict=rec.verdict if rec else None,
                                reason_code=rec.reason_code if rec else "", reason=rec.reason[:2000] if rec else "",
                                peer_error=bool(rec and rec.reason_code == PEER_LOST), exit_code=code, signal=sig,
                                wall_s=rec.child_wall_s if rec else None, log_tail=logs.get(r, "")))

    def fail(verdict: Verdict, code: str, reason: str) -> TPRunResult:
        res = _fail(tp.run, world, started, verdict, code, reason, ranks)
        res.child_wall_s = wall
        return res

    if not pids:
        return fail(Verdict.error, "launcher_failed",
                    f"the TP launcher started no rank (exit {launcher_rc})\n{launcher_log[-2000:]}")
    # 1. a rank that died without a record is the crash; 2. a rank's own failure; 3. peers; 4. timeout.
    for r in ranks:
        if r.verdict is None and r.rank in exits:
            how = f"signal {r.signal}" if r.signal else f"exit status {r.exit_code}"
            code = f"rank_signal_{r.signal}" if r.signal else f"rank_exit_{r.exit_code}"
            return fail(Verdict.crashed, code, f"rank {r.rank} died ({how}) without a verdict; group killed\n"
                                                 f"{r.log_tail[-1500:]}")
    own = [r for r in ranks if r.verdict not in (None, Verdict.passed) and not r.peer_error]
    if own:
        first = own[0]
        rec = records[first.rank]
        assert rec is not None
        rec.reason = f"rank {first.rank}: {rec.reason}"
        return _finish(rec, ranks, wall)
    if timed_out:
        hung = [r.rank for r in ranks if r.rank not in exits]
        return fail(Verdict.timeout, "wall_clock_limit",
                    f"no verdict within {timeout_s:g} s; ranks still running: {hung}; group killed")
    peers = [r for r in ranks if r.peer_error]
    if peers:
        return fail(Verdict.crashed, PEER_LOST, f"ranks {[r.rank for r in peers]} lost their peers: "
                                                f"{peers[0].reason[:1500]}")
    missing = [r.rank for r in ranks if r.verdict is None]
    if missing:
        reason = (f"ranks {missing} never reported (another rank failed first; group killed)" if failed_at
                  else f"ranks {missing} ended without a verdict\n{launcher_log[-1500:]}")
        return fail(Verdict.crashed, "no_result", reason)
    rec = records[0]
    assert rec is not None
    return _finish(rec, ranks, wall)


def _finish(rec: TPRunResult, ranks: list[RankReport], wall: float) -> TPRunResult:
    rec.ranks = ranks
    rec.child_wall_s = wall
    rec.finished_at = datetime.now(timezone.utc)
    return rec


# ================================================================================================
# Launcher side (python -P -m workers.tp_group): forks the ranks, reports their exits
# ================================================================================================

def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def launcher_main() -> None:
    handshake = json.loads(sys.stdin.buffer.read())
    fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(fd, 0)
    os.close(fd)
    # Everything a rank needs, imported once here; no torch op runs and CUDA is never touched.
    import torch  # noqa: F401
    import torch.distributed  # noqa: F401

    import kernels.tp.oproj_allreduce_norm  # noqa: F401
    import kernels.tp.router_split  # noqa: F401
    import workers.check  # noqa: F401

    tp = TPRunSpec.model_validate(handshake["tp"])
    status_fd: int = handshake["status_fd"]
    result_fds: list[int] = handshake["result_fds"]
    pids: dict[int, int] = {}
    for rank in range(tp.world_size):
        if (n := _threads()) != 1:
            raise RuntimeError(f"launcher has {n} threads: forking now is unsafe")
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _become_rank(tp, handshake, rank)
        pids[pid] = rank
        os.write(status_fd, (json.dumps({"rank": rank, "pid": pid}) + "\n").encode())
    for fd in result_fds:
        os.close(fd)  # only the ranks hold the write ends: EOF reaches the worker when a rank ends
    while pids:
        try:
            pid, raw = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid in pids:
            os.write(status_fd, (json.dumps({"rank": pids.pop(pid), "status": raw}) + "\n").encode())
    os._exit(0)


def _become_rank(tp: TPRunSpec, handshake: dict[str, Any], rank: int) -> None:
    """In the forked rank: own log, only its own result pipe and token, then the rank's work. Never returns."""
    code = 1
    try:
        log = os.open(os.path.join(handshake["workdir"], f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        result_fd = handshake["result_fds"][rank]
        for fd in [handshake["status_fd"], *handshake["result_fds"]]:
            if fd != result_fd:
                os.close(fd)
        token = bytes.fromhex(handshake["tokens"][rank])
        handshake["tokens"] = []  # no rank can forge another's record
        if tp.device == "cpu":
            lim = tp.run.memory_limit_mb << 20
            resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
        rank_dir = os.path.join(handshake["workdir"], f"rank{rank}")
        os.makedirs(rank_dir)
        record = run_rank(tp, rank, rank_dir, handshake["rendezvous"])
        payload = record.model_dump_json().encode()
        data = token + struct.pack(">Q", len(payload)) + payload
        view = memoryview(data)
        while view:
            view = view[os.write(result_fd, view):]
        code = 0
    except BaseException:
        try:
            os.write(2, traceback.format_exc().encode(errors="replace"))
        except OSError:
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)  # no atexit, no process-group teardown that could wait on a dead peer




# ================================================================================================
# Rank side (in a forked rank): init the group, compile, check, bench, report
# ================================================================================================

def _derive_seed(base: int, label: str) -> int:
    # The pipeline's derivation (workers/pipeline.py derive_seed), kept here so a rank need not
    # import the single-device pipeline.
    import hashlib
    return int(hashlib.blake2b(f"{base}:{label}".encode(), digest_size=4).hexdigest(), 16)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def run_rank(tp: TPRunSpec, rank: int, rank_dir: str, rendezvous: str) -> TPRunResult:
    import torch
    import torch.distributed as dist

    from workers.failures import Failure

    spec, world = tp.run, tp.world_size
    t0 = time.monotonic()
    result = TPRunResult(run_id=spec.run_id, verdict=Verdict.error, started_at=_now(), world_size=world)
    try:
        device = torch.device("cuda", rank) if tp.device == "cuda" else torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        torch.set_num_threads(spec.bench.cpu_threads)
        result.backend = "nccl" if device.type == "cuda" else "gloo"
        extra: dict[str, Any] = {"device_id": device} if device.type == "cuda" else {}
        dist.init_process_group(result.backend, init_method=f"file://{rendezvous}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=max(spec.timeout_s, 10.0)), **extra)
        _rank_stages(tp, rank, rank_dir, device, result)
    except Failure as f:
        _apply_failure(result, f)
    except Exception as exc:
        if _is_peer_error(exc):
            _end(result, Verdict.crashed, PEER_LOST, f"a collective failed: {type(exc).__name__}: {exc}"[:2000])
        else:
            _end(result, Verdict.error, "harness_error", traceback.format_exc()[-4000:])
    result.child_wall_s = time.monotonic() - t0
    result.finished_at = _now()
    return result


def _end(result: TPRunResult, verdict: Verdict, code: str, reason: str) -> None:
    result.verdict, result.reason_code, result.reason = verdict, code, reason


def _apply_failure(result: TPRunResult, f: Any) -> None:
    from workers.protocol import CheckStage

    if "trials" in f.details or "mismatches" in f.details:
        if result.check is None:
            result.check = CheckStage(passed=False)
        result.check.passed = False
        result.check.trials.extend(t for t in f.details.get("trials", []) if t not in result.check.trials)
        result.check.mismatches = list(f.details.get("mismatches") or [])
    if "cross_rank_identical" in f.details:
        result.cross_rank_identical = f.details["cross_rank_identical"]
    _end(result, f.verdict, f.reason_code, f.reason)


def _is_peer_error(exc: BaseException | None) -> bool:
    """Did this fail because another rank went away (its collective partner, not our own fault)?"""
    import torch.distributed as dist

    if exc is None:
        return False
    if isinstance(exc, dist.DistError):
        return True
    text = str(exc).lower()
    return any(s in text for s in ("connection closed by peer", "connection reset by peer", "gloo", "nccl",
                                   "broken pipe"))


class _Group:
    """What the rank-side stages share."""

    def __init__(self, tp: TPRunSpec, rank: int, device: Any, source_file: str):
        from kernels.slots.base import Shape
        from kernels.tp import TPComm, get_tp_slot

        self.spec = tp.run
        self.world, self.rank, self.device = tp.world_size, rank, device
        self.tps = get_tp_slot(tp.run.slot)
        self.shape = Shape.from_json(tp.run.shape)
        self.m = tp.run.m
        self.comm = TPComm(rank, tp.world_size, device)
        self.source_file = source_file

    def barrier(self) -> None:
        import torch
        import torch.distributed as dist

        if self.device.type == "cuda":
            dist.barrier(device_ids=[self.rank])
            torch.cuda.synchronize(self.device)
        else:
            dist.barrier()

    def call(self, fn: Callable[..., None], inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        from workers.failures import Failure, call_kernel

        try:
            call_kernel(fn, inputs, outputs, self.device, self.source_file)
        except Failure as f:
            if _is_peer_error(f.__cause__):
                raise Failure(Verdict.crashed, PEER_LOST, f.reason) from f.__cause__
            raise

    def disagreement(self, outputs: dict[str, Any]) -> str:
        """Collective: every output bit-compared across ranks ('' when all agree)."""
        import torch

        ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
        found = []
        for name, t in sorted(self.tps.canonical(outputs).items()):
            g = self.comm.all_gather(t)
            bits = g.reshape(self.world, -1).view(ints[g.element_size()])
            for r in range(1, self.world):
                n = int((bits[r] != bits[0]).sum())
                if n:
                    found.append(f"{name}: rank {r} differs from rank 0 in {n} of {t.numel()} elements")
        return "; ".join(found)


def _rank_stages(tp: TPRunSpec, rank: int, rank_dir: str, device: Any, result: TPRunResult) -> None:
    from workers.protocol import CheckStage, CompileStage

    spec = tp.run
    g = _Group(tp, rank, device, os.path.join(rank_dir, f"variant_{spec.source_hash[:12]}.py"))
    result.tp_slot = g.tps.name
    result.fingerprint = _group_fingerprint(g, result.backend)

    t = time.perf_counter()
    fn = _compile(g, result)
    result.compile = CompileStage(ok=True, seconds=time.perf_counter() - t, backend=f"{spec.language} (TP)")

    t = time.perf_counter()
    result.stock_check = _stock_check(g)
    result.check = CheckStage(passed=False)
    trials = _check(g, fn)
    result.check = CheckStage(passed=True, seconds=time.perf_counter() - t, trials=trials)
    result.cross_rank_identical = True
    result.uses_library = True  # torch collectives and GEMMs: TP variants are ranked as library users

    result.tp_bench, timed = _bench(g, fn)
    result.check.trials.append(timed)
    _end(result, Verdict.passed, "ok", f"compiled, checked and benchmarked on {g.world} ranks")


def _compile(g: _Group, result: TPRunResult) -> Callable[..., None]:
    import inspect

    from kernels.backends.base import CompileError, line_in_source, load_module
    from workers.failures import Failure
    from workers.protocol import CompileStage

    spec = g.spec
    try:
        module = load_module(spec.source, f"kt_tp_variant_{spec.source_hash[:12]}", g.source_file)
        try:
            inspect.signature(module.build).bind({}, {}, g.comm)
        except TypeError:
            raise CompileError("a TP variant defines build(config, shape, comm=None); this build() takes no comm")
        fn = module.build(dict(spec.config), g.tps.build_arg(g.shape, g.m, g.rank, g.world), g.comm)
        if not callable(fn):
            raise CompileError(f"build() returned {type(fn).__name__}, not a callable")
        return fn
    except CompileError as exc:
        result.compile = CompileStage(ok=False, log=(exc.log or str(exc))[-8000:], line=exc.line)
        raise Failure(Verdict.compile_failed, "compile_error", str(exc) + (f" (line {exc.line})" if exc.line else ""))
    except Exception as exc:
        line = line_in_source(exc, g.source_file)
        result.compile = CompileStage(ok=False, log=traceback.format_exc()[-8000:], line=line)
        raise Failure(Verdict.compile_failed, "compile_error", f"{type(exc).__name__} in build(): {exc}"
                      + (f" (line {line})" if line else ""))


def _trial(g: _Group, fn: Callable[..., None], kind: str, seed: int, trials: list[Any], history: list[dict[str, Any]],
           reuse: tuple[dict[str, Any], dict[str, Any]] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """One check trial on every rank. Raises Failure; returns this rank's (inputs, outputs)."""
    import torch

    from workers.check import hash_tensors, scrub
    from workers.failures import Failure
    from workers.protocol import Trial

    tps = g.tps
    full = tps.make_full_inputs(g.shape, g.m, seed, g.world, g.device)  # same seed: same problem on every rank
    shard = tps.shard(full, g.shape, g.rank, g.world)
    if reuse is None:
        inputs, outputs = shard, tps.alloc_outputs(g.shape, g.m, g.world, g.device)
    else:  # same tensors (id, data_ptr), new values: defeats answers cached by address
        inputs, outputs = reuse
        for name, t in inputs.items():
            t.copy_(shard[name])
    tps.base.poison(outputs)
    before = hash_tensors(inputs)
    g.barrier()
    g.call(fn, inputs, outputs)
    if hash_tensors(inputs) != before:
        raise Failure(Verdict.rejected, "wrote_inputs", f"{kind} trial (seed {seed}): the variant changed its inputs")
    disagree = g.disagreement(outputs)
    if disagree:
        raise Failure(Verdict.check_failed, "ranks_disagree", f"{kind} trial (seed {seed}): ranks returned different "
                      f"outputs: {disagree}", trials=trials, cross_rank_identical=False)
    ref = tps.reference(g.shape, g.world, full)  # only now: nothing of it existed during the call
    outcome = tps.check(g.shape, g.world, outputs, ref, full)
    scrub(ref)
    trials.append(Trial(kind=kind, seed=seed, passed=outcome.passed, rel_l2=outcome.rel_l2,
                        max_abs_err=outcome.max_abs_err))
    now = {k: t.detach().to("cpu", copy=True) for k, t in outputs.items()}
    if not outcome.passed:
        if any(all(torch.equal(now[k], old[k]) for k in now) for old in history):
            raise Failure(Verdict.rejected, "cached_output", f"{kind} trial (seed {seed}): wrong, and bit-identical "
                          "to an earlier call's outputs on other inputs", trials=trials)
        raise Failure(Verdict.check_failed, "mismatch", f"{kind} trial (seed {seed}): {outcome.reason}",
                      trials=trials, mismatches=outcome.mismatches)
    history.append(now)
    return inputs, outputs


def _stock_check(g: _Group) -> Any:
    """The TP stock path through the same check: if it fails, the harness (not the variant) is wrong."""
    from workers.failures import Failure

    trials: list[Any] = []
    try:
        _trial(g, g.tps.stock(g.shape, g.m, g.comm), "stock", _derive_seed(g.spec.seed, "tp-stock"), trials, [])
    except Failure as f:
        raise Failure(Verdict.error, "stock_check_failed", f"the TP stock path failed its own check: {f.reason}")
    return trials[0]


def _check(g: _Group, fn: Callable[..., None]) -> list[Any]:
    trials: list[Any] = []
    history: list[dict[str, Any]] = []
    seeds = [_derive_seed(g.spec.seed, f"tp-check{k}") for k in range(g.spec.check_trials + 1)]
    last = None
    for k, seed in enumerate(seeds[:-1]):
        last = _trial(g, fn, "fresh" if k == 0 else "fresh_again", seed, trials, history)
    _trial(g, fn, "same_buffers_new_values", seeds[-1], trials, history, reuse=last)
    return trials


def _bench(g: _Group, fn: Callable[..., None]) -> tuple[Any, Any]:
    import torch

    from workers import stats
    from workers.bench import choose_input_sets, memory_budget_bytes
    from workers.check import hash_tensors, scrub
    from workers.failures import Failure
    from workers.fingerprint import llc_bytes
    from workers.protocol import Trial
    from workers.tp_protocol import TPBenchStage

    tps, settings = g.tps, g.spec.bench
    seed = _derive_seed(g.spec.seed, "tp-bench")
    set_bytes = tps.rank_bytes(g.shape, g.m, g.world)
    budget = memory_budget_bytes(g.device) // (g.world if g.device.type == "cpu" else 1)  # ranks share the host
    n_sets = choose_input_sets(set_bytes, llc_bytes(g.device), budget, settings)
    replicated = tps.replicated_baseline(g.shape, g.m)
    shards, fulls = [], []
    for i in range(n_sets):
        full = tps.make_full_inputs(g.shape, g.m, seed + i, g.world, g.device)
        shards.append(tps.shard(full, g.shape, g.rank, g.world))
        fulls.append(full if replicated is not None else None)
    hashes = [hash_tensors(s) for s in shards]
    impls: dict[str, tuple[Callable[..., None], list[Any]]] = {"variant": (fn, shards),
                                                                "stock": (tps.stock(g.shape, g.m, g.comm), shards)}
    if replicated is not None:
        impls["replicated"] = (replicated, fulls)
    outs = {name: [tps.alloc_outputs(g.shape, g.m, g.world, g.device) for _ in range(n_sets)] for name in impls}

    def runner(name: str) -> Callable[[int], None]:
        kfn, sets = impls[name]

        def run(i: int) -> None:
            kfn(**sets[i], **outs[name][i])
        return run

    runs = {name: runner(name) for name in impls}
    try:
        if g.device.type == "cuda":
            samples, timer = _measure_cuda(g, runs, outs, n_sets, settings), "cuda_graph_group"
        else:
            samples, timer = _measure_cpu(g, runs, outs, n_sets, settings), "cpu_wall_barrier_group"
    except Failure:
        raise
    except Exception as exc:
        if _is_peer_error(exc):
            raise Failure(Verdict.crashed, PEER_LOST, f"a collective failed during the bench: {exc}"[:2000]) from exc
        raise Failure(Verdict.crashed, "variant_exception", f"raised during the bench: {type(exc).__name__}: {exc}")

    # The slowest rank sets the layer's time: gather every rank's samples, keep the max per round.
    names = list(impls)
    local = torch.tensor([samples[n] for n in names], dtype=torch.float64, device=g.device)
    group = g.comm.all_gather(local).max(dim=0).values.cpu()
    mine = local.cpu()
    per = {n: group[i].tolist() for i, n in enumerate(names)}

    # What the timed calls wrote must still be right, identical across ranks, inputs untouched.
    for i in range(n_sets):
        if hash_tensors(shards[i]) != hashes[i]:
            raise Failure(Verdict.rejected, "wrote_inputs", f"input set {i} changed during the bench")
    worst = Trial(kind=f"timed[{n_sets} sets]", seed=seed, passed=True)
    for i in range(n_sets):
        if g.disagreement(outs["variant"][i]):
            raise Failure(Verdict.rejected, "timed_ranks_disagree", f"timed outputs of set {i} differ across ranks",
                          cross_rank_identical=False)
        full = tps.make_full_inputs(g.shape, g.m, seed + i, g.world, g.device)
        ref = tps.reference(g.shape, g.world, full)
        outcome = tps.check(g.shape, g.world, outs["variant"][i], ref, full)
        scrub(ref)
        if not outcome.passed:
            raise Failure(Verdict.rejected, "timed_output_mismatch", f"outputs of the timed calls on input set {i} "
                          f"are wrong although the check passed: {outcome.reason}", mismatches=outcome.mismatches)
        worst.rel_l2 = max(worst.rel_l2 or 0.0, outcome.rel_l2 or 0.0)
        worst.max_abs_err = max(worst.max_abs_err or 0.0, outcome.max_abs_err or 0.0)

    v, b = stats.summarize(per["variant"]), stats.summarize(per["stock"])
    lo, hi = stats.bootstrap_speedup_ci(per["variant"], per["stock"], resamples=settings.bootstrap, seed=seed)
    rep = stats.summarize(per["replicated"]).median if "replicated" in per else None
    stage = TPBenchStage(
        timer=timer, world_size=g.world, seed=seed, rounds=v.n, input_sets=n_sets, set_bytes=set_bytes,
        comm_bytes=tps.comm_bytes(g.shape, g.m, g.world), median_us=v.median, p10_us=v.p10, p90_us=v.p90, cv=v.cv,
        baseline_median_us=b.median, baseline_p10_us=b.p10, baseline_p90_us=b.p90, baseline_cv=b.cv,
        speedup=b.median / max(v.median, 1e-6), speedup_ci_lo=lo, speedup_ci_hi=hi,
        rank_medians_us=[float(x) for x in g.comm.all_gather(mine[0].median().reshape(1).to(g.device)).flatten()],
        replicated_median_us=rep, speedup_vs_replicated=(rep / max(v.median, 1e-6)) if rep is not None else None)
    return stage, worst


def _poison_all(g: _Group, outs: dict[str, list[Any]]) -> None:
    for sets in outs.values():
        for o in sets:
            g.tps.base.poison(o)


def _measure_cpu(g: _Group, runs: dict[str, Callable[[int], None]], outs: dict[str, list[Any]], n_sets: int,
                 settings: Any) -> dict[str, list[float]]:
    """Wall clock around each call, every call started after a barrier. Rank 0 decides when to stop
    (broadcast), so every rank runs the same rounds and no collective is left unmatched."""
    import torch
    import torch.distributed as dist

    from workers.timers import round_order

    names = list(runs)
    cursor = 0
    for r in range(settings.warmup):
        for name in round_order(names, r):
            g.barrier()
            runs[name](cursor % n_sets)
            cursor += 1
    samples: dict[str, list[float]] = {n: [] for n in names}
    start = time.perf_counter()
    flag = torch.zeros(1, dtype=torch.int32)
    r = 0
    while True:
        if g.rank == 0:
            more = r < settings.max_rounds and (r < settings.min_rounds or time.perf_counter() - start < settings.min_time_s)
            flag.fill_(int(more))
        dist.broadcast(flag, src=0)
        if not int(flag):
            break
        for name in round_order(names, r):
            i = cursor % n_sets
            cursor += 1
            for o in outs[name][i].values():
                o.fill_(float("nan")) if o.is_floating_point() else o.fill_(-1)
            g.barrier()
            t0 = time.perf_counter_ns()
            runs[name](i)
            samples[name].append((time.perf_counter_ns() - t0) / 1e3)
        r += 1
    return samples


def _measure_cuda(g: _Group, runs: dict[str, Callable[[int], None]], outs: dict[str, list[Any]], n_sets: int,
                  settings: Any) -> dict[str, list[float]]:
    """One CUDA graph per implementation of ``calls`` back-to-back calls (collectives captured too),
    replayed after a barrier between events. Capture failure = work outside the stream."""
    import torch

    from workers.failures import Failure
    from workers.timers import round_order

    calls = settings.graph_calls or n_sets
    names = list(runs)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: lazy init, NCCL communicators, autotuning, outside capture
        for _ in range(max(settings.warmup, 1)):
            for name in names:
                for i in range(n_sets):
                    runs[name](i)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graphs = {}
    for name in names:
        graph = torch.cuda.CUDAGraph()
        g.barrier()
        try:
            with torch.cuda.graph(graph):
                for j in range(calls):
                    runs[name](j % n_sets)
            torch.cuda.synchronize()
        except Exception as exc:
            raise Failure(Verdict.rejected, "stream_escape", f"{name}: CUDA graph capture failed: "
                          f"{type(exc).__name__}: {exc}") from exc
        graphs[name] = graph
    _poison_all(g, outs)
    torch.cuda.synchronize()
    start_ev, end_ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(max(settings.min_rounds, 3)):  # fixed: every rank replays the same rounds
        for name in round_order(names, r):
            g.barrier()
            start_ev.record()
            graphs[name].replay()
            end_ev.record()
            end_ev.synchronize()
            samples[name].append(start_ev.elapsed_time(end_ev) * 1e3 / calls)
    return samples


def _group_fingerprint(g: _Group, backend: str) -> dict[str, Any]:
    """This rank's device fingerprint plus the group: world size, every rank's device, GPU count, link."""
    import torch
    import torch.distributed as dist

    from workers.fingerprint import fingerprint

    fp = fingerprint(g.device, torch.get_num_threads())
    mine = {"rank": g.rank, "hardware_key": fp["hardware_key"], "name": fp["name"], "host": os.uname().nodename}
    every: list[Any] = [None] * g.world
    dist.all_gather_object(every, mine)
    link = link_info(g.world) if g.device.type == "cuda" else {"type": "loopback", "detail": "gloo over lo, one host"}
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if g.device.type == "cuda" else None
    return {**fp, "world_size": g.world, "tp_backend": backend, "nccl": nccl,
            "gpu_count": torch.cuda.device_count() if g.device.type == "cuda" else 0,
            "hosts": sorted({e["host"] for e in every}), "rank_devices": [e["name"] for e in every],
            "link": link, "tp_hardware_key": f"{fp['hardware_key']}-tp{g.world}-{link['type']}"}


def link_info(world: int) -> dict[str, Any]:
    """Link types between the first ``world`` GPUs from ``nvidia-smi topo -m`` (NV18, PIX, SYS, ...)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {"type": "unknown", "detail": "nvidia-smi not found"}
    try:
        text = subprocess.run([smi, "topo", "-m"], capture_output=True, text=True, timeout=15, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return {"type": "unknown", "detail": f"nvidia-smi topo -m failed: {exc}"}
    return {"type": parse_topology(text, world), "topology": text[:4000]}


def parse_topology(text: str, world: int) -> str:
    """'NV18' when every pair of the first ``world`` GPUs is linked alike, 'NV18+SYS' when mixed."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    rows = {}
    for line in text.splitlines():
        cells = line.split()
        if cells and re.fullmatch(r"GPU\d+", cells[0]):
            rows[int(cells[0][3:])] = cells[1:]
    kinds = set()
    for i in range(world):
        for j in range(world):
            if i != j and i in rows and j < len(rows[i]):
                kinds.add(rows[i][j])
    return "+".join(sorted(kinds)) or "unknown"


if __name__ == "__main__":
    launcher_main()
